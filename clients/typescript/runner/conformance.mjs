// The TypeScript client's conformance runner (clients/conformance/README.md), run on the
// built package (dist/):
//
//   node runner/conformance.mjs run <scenarios_dir>   every scenario JSON through the client
//   node runner/conformance.mjs worker                a Worker on $JOBQUEUE_QUEUE until SIGTERM
//
// Environment: JOBQUEUE_URL (the gateway, http://127.0.0.1:PORT/sdk) and JOBQUEUE_TOKENS
// (a JSON file mapping a token role to its token); for worker, JOBQUEUE_QUEUE and
// JOBQUEUE_CONCURRENCY (default 4).

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { Client, GatewayError, Worker } from "../dist/index.js";

const LANG = "typescript";
const REFERENCE = /\$\{([^}]+)\}/g;
/** JobIn's options in the gateway's names, and the client's. */
const ENQUEUE_OPTIONS = {
  queue: "queue", priority: "priority", delay: "delay", run_at: "runAt", expires_ms: "expiresMs",
  timeout_ms: "timeoutMs", max_retry: "maxRetry", unique_key: "uniqueKey", unique_mode: "uniqueMode",
  unique_ttl_ms: "uniqueTtlMs", id: "id", limit_key: "limitKey", batch: "batch", after: "after",
  on_upstream_failure: "onUpstreamFailure",
};

class ScenarioError extends Error {}

function env(name) {
  const value = (process.env[name] ?? "").trim();
  if (!value) throw new ScenarioError(`${name} is not set`);
  return value;
}

function tokens() {
  const path = env("JOBQUEUE_TOKENS");
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new ScenarioError(`cannot read JOBQUEUE_TOKENS ${path}: ${error.message}`);
  }
}

function workerToken(roles) {
  for (const role of ["work", "worker", "all", "admin"]) {
    if (roles[role]) return roles[role];
  }
  throw new ScenarioError("JOBQUEUE_TOKENS has no work token");
}

/** The canonical class name (README "Errors: one class per code"). */
function canonicalClass(error) {
  if (error.status === 0) return "GatewayUnreachable";
  return error.constructor.name.replace(/(Exception|Error)$/, "") || "GatewayError";
}

function errorJson(error) {
  return { ...error.body, status: error.status, code: error.code, class: canonicalClass(error) };
}

function first(step, ...names) {
  for (const name of names) {
    if (Object.hasOwn(step, name)) return step[name];
  }
  return undefined;
}

function canonicalVerb(name) {
  let verb = String(name ?? "").trim().replace(/^worker[._]/, "");
  const ids = /^(ids_|id_|id\.|ids\.)/.exec(verb);
  if (ids) return "ids." + verb.slice(ids[0].length);
  return { get: "get_job", batch: "enqueue_batch", enqueue_many: "enqueue_batch", stop: "stop_worker" }[verb] ?? verb;
}

function known(args, optional, ...required) {
  for (const name of Object.keys(args)) {
    if (!optional.includes(name) && !required.includes(name)) throw new ScenarioError(`unknown argument ${name}`);
  }
  for (const name of required) {
    if (!Object.hasOwn(args, name)) throw new ScenarioError(`missing argument ${name}`);
  }
}

function jobSpec(args) {
  known(args, ["payload", ...Object.keys(ENQUEUE_OPTIONS)], "job_type");
  const spec = { jobType: args.job_type, payload: args.payload };
  for (const [gateway, client] of Object.entries(ENQUEUE_OPTIONS)) {
    if (Object.hasOwn(args, gateway)) spec[client] = args[gateway];
  }
  return spec;
}

function some(args, names) {
  const out = {};
  for (const [gateway, client] of Object.entries(names)) {
    if (Object.hasOwn(args, gateway)) out[client] = args[gateway];
  }
  return out;
}

/** The answer of `verb` made through `client`, as the gateway's JSON. */
async function call(client, verb, args) {
  switch (verb) {
    case "enqueue": {
      const { jobType, payload, ...options } = jobSpec(args);
      return client.enqueue(jobType, payload, options);
    }
    case "enqueue_batch":
      known(args, [], "jobs");
      return { results: await client.enqueueBatch(args.jobs.map(jobSpec)) };
    case "get_job":
      known(args, [], "jid");
      return client.getJob(args.jid);
    case "cancel":
      known(args, [], "jid");
      return client.cancel(args.jid);
    case "retry":
      known(args, [], "jid");
      return client.retry(args.jid);
    case "ids.add":
    case "ids.set":
    case "ids.update": {
      known(args, ["value", "job_type", "at", "delay"], "queue", "id");
      const value = some(args, { value: "value", job_type: "jobType", at: "at", delay: "delay" });
      return client.ids[verb.slice(4)](args.queue, args.id, value);
    }
    case "ids.cancel":
      known(args, [], "queue", "id");
      return client.ids.cancel(args.queue, args.id);
    case "ids.get":
      known(args, [], "queue", "id");
      return client.ids.get(args.queue, args.id);
    case "ids.list":
      known(args, ["prefix", "state", "limit", "cursor"], "queue");
      return client.ids.list(args.queue, some(args, { prefix: "prefix", state: "state", limit: "limit", cursor: "cursor" }));
    case "register":
      known(args, ["host", "pid", "languages", "job_types", "concurrency", "version"], "name", "queues");
      return client.register(some(args, {
        name: "name", queues: "queues", host: "host", pid: "pid", languages: "languages",
        job_types: "jobTypes", concurrency: "concurrency", version: "version",
      }));
    case "claim":
      known(args, ["job_types", "limit", "wait_ms", "worker", "lease_ms"], "queues");
      return { jobs: await client.claim(some(args, {
        queues: "queues", job_types: "jobTypes", limit: "limit", wait_ms: "waitMs", worker: "worker", lease_ms: "leaseMs",
      })) };
    case "heartbeat":
      known(args, ["lease_ms"], "jid", "lease_token");
      return client.heartbeat(args.jid, args.lease_token, args.lease_ms);
    case "complete":
      known(args, ["result"], "jid", "lease_token");
      return client.complete(args.jid, args.lease_token, args.result);
    case "fail":
      known(args, ["error", "exception_class", "retry", "cancelled"], "jid", "lease_token");
      return client.fail(args.jid, args.lease_token, some(args, {
        error: "error", exception_class: "exceptionClass", retry: "retry", cancelled: "cancelled",
      }));
    case "stop_worker":
      known(args, [], "name");
      return client.stopWorker(args.name);
    default:
      throw new ScenarioError(`unknown verb ${verb}`);
  }
}

/** Why `actual` does not contain `expected`, or null when it does. */
function mismatch(expected, actual, where = "") {
  const label = where || "the answer";
  if (expected !== null && typeof expected === "object" && !Array.isArray(expected)) {
    if (actual === null || typeof actual !== "object" || Array.isArray(actual)) {
      return `expected an object at ${label}, got ${JSON.stringify(actual)}`;
    }
    for (const [key, value] of Object.entries(expected)) {
      const path = where ? `${where}.${key}` : key;
      if (!Object.hasOwn(actual, key)) return `no ${path}`;
      const problem = mismatch(value, actual[key], path);
      if (problem) return problem;
    }
    return null;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) {
      return `expected ${expected.length} items at ${label}, got ${JSON.stringify(actual)}`;
    }
    for (let i = 0; i < expected.length; i++) {
      const problem = mismatch(expected[i], actual[i], `${where}[${i}]`);
      if (problem) return problem;
    }
    return null;
  }
  return expected === actual ? null : `${label} is ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`;
}

function lookup(root, path) {
  let node = root;
  for (const part of path.split(".").filter(Boolean)) {
    if (node !== null && typeof node === "object" && Object.hasOwn(node, part)) {
      node = node[part];
    } else {
      throw new ScenarioError(`nothing at ${path}`);
    }
  }
  return node;
}

class Scenario {
  constructor(url, roles) {
    this.url = url;
    this.roles = roles;
    this.clients = new Map();
    // ${run}: unique to this run, so its ids and queues never meet an earlier run's.
    this.saved = { run: Date.now().toString(36) + process.hrtime.bigint().toString(36) + process.pid.toString(36) };
  }

  client(role) {
    if (!this.roles[role]) throw new ScenarioError(`no token of role ${role} in JOBQUEUE_TOKENS`);
    if (!this.clients.has(role)) this.clients.set(role, new Client({ url: this.url, token: this.roles[role] }));
    return this.clients.get(role);
  }

  resolve(node) {
    if (typeof node === "string") {
      if (node.startsWith("$") && !node.startsWith("${") && node.length > 1) return lookup(this.saved, node.slice(1));
      return node.replace(REFERENCE, (_, path) => {
        const value = lookup(this.saved, path);
        return typeof value === "string" ? value : JSON.stringify(value);
      });
    }
    if (Array.isArray(node)) return node.map((item) => this.resolve(item));
    if (node !== null && typeof node === "object") {
      return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, this.resolve(value)]));
    }
    return node;
  }

  save(step, answer) {
    const save = step.save;
    if (save === undefined || save === null) return;
    if (typeof save === "string") {
      this.saved[save] = answer;
      return;
    }
    for (const [name, path] of Object.entries(save)) {
      this.saved[name] = lookup(answer, String(path).replace(/^\$\.?/, ""));
    }
  }

  async run(scenario) {
    if (!Array.isArray(scenario.steps)) throw new ScenarioError("no steps");
    let n = 0;
    for (const step of scenario.steps) {
      n++;
      const verb = canonicalVerb(first(step, "verb", "call", "op"));
      try {
        await this.step(step, verb);
      } catch (error) {
        throw new ScenarioError(`step ${n} (${verb}): ${error.message}`);
      }
    }
  }

  async step(step, verb) {
    const client = this.client(String(first(step, "token", "role", "as") ?? "all"));
    const args = this.resolve(first(step, "args", "params", "with", "input") ?? {});
    const expectedError = first(step, "error", "expect_error", "raises");
    let answer;
    try {
      // Through JSON, as the gateway's answer: undefined members dropped.
      answer = JSON.parse(JSON.stringify((await call(client, verb, args)) ?? null));
    } catch (error) {
      if (!(error instanceof GatewayError)) throw error;
      if (expectedError === undefined || expectedError === null) {
        throw new ScenarioError(`unexpected ${canonicalClass(error)}: ${error.message}`);
      }
      this.checkError(this.resolve(expectedError), error);
      this.save(step, errorJson(error));
      return;
    }
    if (expectedError !== undefined && expectedError !== null) {
      throw new ScenarioError(`expected ${JSON.stringify(expectedError)}, got the answer ${JSON.stringify(answer)}`);
    }
    for (const name of ["expect", "expected", "result"]) {
      if (Object.hasOwn(step, name)) {
        const problem = mismatch(this.resolve(step[name]), answer);
        if (problem) throw new ScenarioError(`${problem} in ${JSON.stringify(answer)}`);
        break;
      }
    }
    this.save(step, answer);
  }

  checkError(expected, error) {
    const kind = canonicalClass(error);
    if (typeof expected === "string") {
      if (expected !== kind && expected !== error.code && expected !== error.constructor.name) {
        throw new ScenarioError(`expected ${expected}, got ${kind}: ${error.message}`);
      }
      return;
    }
    const { class: cls, type, ...wanted } = expected;
    const want = cls ?? type;
    if (want !== undefined && want !== kind) throw new ScenarioError(`expected ${want}, got ${kind}: ${error.message}`);
    const problem = mismatch(wanted, errorJson(error));
    if (problem) throw new ScenarioError(`${problem} in the error ${JSON.stringify(errorJson(error))}`);
  }
}

async function run(directory) {
  const files = readdirSync(directory).filter((name) => name.endsWith(".json")).sort();
  if (files.length === 0) throw new ScenarioError(`no scenario JSON in ${directory}`);
  const url = env("JOBQUEUE_URL");
  const roles = tokens();
  let passed = 0;
  let failed = 0;
  for (const file of files) {
    let name = file.replace(/\.json$/, "");
    try {
      const data = JSON.parse(readFileSync(join(directory, file), "utf8"));
      name = data.name || name;
      await new Scenario(url, roles).run(data);
      console.log(`ok ${name}`);
      passed++;
    } catch (error) {
      console.log(`not ok ${name}: ${String(error.message ?? error).replace(/\s+/g, " ")}`);
      failed++;
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

/** The mixed drain's worker: echo and spawn (README "The worker") until SIGTERM. */
async function worker() {
  const url = env("JOBQUEUE_URL");
  const client = new Client({ url, token: workerToken(tokens()) });
  const concurrency = Number(process.env.JOBQUEUE_CONCURRENCY || 4);
  const stats = await new Worker(
    {
      "conformance.echo": (payload) => ({ lang: LANG, payload }),
      "conformance.spawn": async (payload) => {
        const child = await client.enqueue(payload.job_type, payload.payload, { queue: payload.queue });
        return { lang: LANG, jid: child.jid };
      },
      "conformance.sleep": async (payload) => {
        await new Promise((resolve) => setTimeout(resolve, payload.ms));
        return { lang: LANG, slept: payload.ms };
      },
    },
    {
      url, token: workerToken(tokens()), client, queues: [env("JOBQUEUE_QUEUE")], concurrency,
      name: `conformance-${LANG}-${process.pid}`,
    },
  ).run();
  process.stderr.write(`conformance (${LANG}): worker stopped: ${JSON.stringify(stats)}\n`);
  return 0;
}

const [command, ...rest] = process.argv.slice(2);
try {
  if (command === "run" && rest.length === 1) {
    process.exitCode = await run(rest[0]);
  } else if (command === "worker" && rest.length === 0) {
    process.exitCode = await worker();
  } else {
    process.stderr.write("usage: conformance.mjs run <scenarios_dir> | worker\n");
    process.exitCode = 2;
  }
} catch (error) {
  process.stderr.write(`conformance (${LANG}): ${error.message ?? error}\n`);
  process.exitCode = 2;
}
