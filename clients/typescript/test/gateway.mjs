// A live gateway for the tests: `manage.py runserver` on 127.0.0.1 and a free port,
// with tests.settings on a SQLite file of its own (migrated first), and tokens made
// by `manage.py jobqueue token create`. Every step has a bounded timeout.

import { execFile, spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const PYTHON = process.env.JQ_TEST_PYTHON ?? join(REPO, ".venv/bin/python");

/** The external job types (JOBQUEUE["GATEWAY"]["JOB_TYPES"]) the tests run. */
export const JOB_TYPES = {
  "ts.echo": { queue: "ts" },
  "ts.fail": { queue: "ts", max_retry: 0 },
  "ts.slow": { queue: "ts-slow" },
  "ts.cli": { queue: "ts-cli" },
  "ts.lease": { queue: "ts-lease", max_retry: 3 },
  "ts.pause": { queue: "ts-pause" },
  "ts.drain": { queue: "ts-drain" },
  "ts.bulk": { queue: "ts-bulk", max_retry: 0 },
  "ts.progress": { queue: "ts-progress" },
};

function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

function manage(env, args, timeout = 90_000) {
  return new Promise((ok, fail) => {
    execFile(PYTHON, ["manage.py", ...args], { cwd: REPO, env, timeout }, (error, stdout, stderr) => {
      if (error) {
        fail(new Error(`manage.py ${args.join(" ")} failed: ${error.message}\n${stderr}`));
      } else {
        ok(stdout);
      }
    });
  });
}

/**
 * Start a gateway; resolves `{url, token(options), stop()}` once it answers.
 * `token({scopes, queues, name})` runs `jobqueue token create` and returns the text;
 * `manage(args)` runs another `manage.py` command on the gateway's database.
 * `jobqueue`: more JOBQUEUE settings for the site (e.g. from {@link proSettings}).
 */
export async function startGateway({ jobqueue = {} } = {}) {
  const dir = await mkdtemp(join(tmpdir(), "jobqueue-ts-"));
  const env = { ...process.env };
  delete env.DATABASE_URL;
  Object.assign(env, {
    DJANGO_SETTINGS_MODULE: "tests.settings",
    JOBQUEUE_TEST_SQLITE: join(dir, "gateway.sqlite3"),
    // A 10 s lease: long enough that a loaded machine's stall does not expire it
    // between claim and report (the tests count each job run once), short enough
    // that a lost lease is reaped within seconds (the claim route reaps every
    // LEASE_MS / 2; the lost-lease test takes a 1 s lease of its own); heartbeats
    // every HEARTBEAT_MS.
    JOBQUEUE_TEST_JOBQUEUE: JSON.stringify({
      LEASE_MS: 10000,
      HEARTBEAT_MS: 500,
      GATEWAY: { JOB_TYPES, CLAIM_POLL_MS: 50 },
      ...jobqueue,
    }),
    PYTHONUNBUFFERED: "1",
  });
  await manage(env, ["migrate", "--no-input", "-v", "0"]);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = spawn(PYTHON, ["manage.py", "runserver", "--noreload", `127.0.0.1:${port}`], {
    cwd: REPO,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  server.stdout.on("data", (chunk) => (log += chunk));
  server.stderr.on("data", (chunk) => (log += chunk));
  const exited = new Promise((ok) => server.once("exit", ok));
  const stop = async () => {
    if (server.exitCode === null) {
      server.kill("SIGTERM");
      const timer = setTimeout(() => server.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (server.exitCode !== null) {
      await stop();
      throw new Error(`runserver exited with ${server.exitCode}:\n${log}`);
    }
    try {
      // The schema is built on each request: seconds on a loaded machine.
      const answer = await fetch(`${url}/sdk/openapi.json`, { signal: AbortSignal.timeout(15_000) });
      if (answer.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`runserver did not answer within 60 s:\n${log}`);
    }
    await new Promise((ok) => setTimeout(ok, 100));
  }
  const token = async ({ scopes = "produce,read,work", queues = "*", name = "ts-tests" } = {}) => {
    const out = await manage(env, ["jobqueue", "token", "create", "--name", name, "--scopes", scopes, "--queues", queues]);
    const text = out.trim().split("\n").pop().trim();
    if (!text.startsWith("jqt_")) {
      throw new Error(`no token in the output of token create: ${out}`);
    }
    return text;
  };
  // `manage.py ARGS` on the gateway's database, in a process of its own; resolves its stdout.
  const manageHere = (args) => manage(env, args);
  return { url, env, token, stop, manage: manageHere, log: () => log };
}

/**
 * The JOBQUEUE settings of a Pro site: a key pair of the test's own made by
 * `python -m django_jobqueue.store.licence keygen`, and a licence it `issue`s, valid
 * until tomorrow (docs/licence.md). Resolves `{LICENCE_KEY, LICENCE_PUBLIC_KEYS}`.
 */
export async function proSettings() {
  const dir = await mkdtemp(join(tmpdir(), "jobqueue-ts-licence-"));
  const licence = (args) =>
    new Promise((ok, fail) => {
      execFile(PYTHON, ["-m", "django_jobqueue.store.licence", ...args], { cwd: REPO, timeout: 30_000 }, (error, stdout, stderr) =>
        error ? fail(new Error(`licence ${args[0]} failed: ${error.message}\n${stderr}`)) : ok(stdout),
      );
    });
  try {
    await licence(["keygen", "--out", dir, "--name", "ts"]);
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    const key = (await licence(["issue", "--private-key", join(dir, "ts.key"), "--licensee", "TS tests", "--expires", tomorrow])).trim();
    return { LICENCE_KEY: key, LICENCE_PUBLIC_KEYS: [await readFile(join(dir, "ts.pub"), "utf8")] };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Poll `fn` every 50 ms until it returns a truthy value; reject after `ms`. */
export async function until(fn, ms = 15_000, what = "the condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${ms} ms`);
    await new Promise((ok) => setTimeout(ok, 50));
  }
}

/** A logger that keeps the worker's lines for assertions instead of printing them. */
export function memoryLogger() {
  const lines = [];
  const keep = (level) => (message) => lines.push(`${level} ${message}`);
  return { lines, info: keep("info"), warn: keep("warn"), error: keep("error") };
}
