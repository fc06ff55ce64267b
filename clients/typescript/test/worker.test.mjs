// The worker loop and worker-cli against a live gateway: jobs run to done, a cancel
// request reaches the handler, a lost lease drops the outcome (409), SIGTERM stops
// the CLI gracefully.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Client, PermanentFailure, Worker } from "../dist/index.js";
import { memoryLogger, startGateway, until } from "./gateway.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, "../dist/worker-cli.js");

let gateway;
let token;
let client;

before(async () => {
  gateway = await startGateway();
  token = await gateway.token({ scopes: "produce,read,work" });
  client = new Client({ url: gateway.url, token });
});

after(async () => {
  await gateway?.stop();
});

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

test("the Worker runs every job to done, fails and cancels as told, then stops", { timeout: 60_000 }, async () => {
  const ran = [];
  const handlers = {
    "ts.echo": async (payload, ctx) => {
      ran.push(ctx.jid);
      await sleep(20);
      return { echoed: payload, attempt: ctx.attempt };
    },
    "ts.fail": () => {
      throw new PermanentFailure("no such address");
    },
    "ts.slow": async (payload, ctx) => {
      while (!ctx.cancelRequested) {
        await sleep(50);
      }
      throw new Error("stopped on request");
    },
  };
  const logger = memoryLogger();
  const worker = new Worker(handlers, {
    url: gateway.url,
    token,
    queues: ["ts", "ts-slow"],
    concurrency: 4,
    waitMs: 1000,
    handleSignals: false,
    logger,
  });
  const results = await client.enqueueBatch(Array.from({ length: 20 }, (_, n) => ({ jobType: "ts.echo", payload: { n } })));
  const failing = await client.enqueue("ts.fail", { to: "nobody" });
  const slow = await client.enqueue("ts.slow", null);
  const running = worker.run();
  try {
  await until(async () => (await client.getJob(slow.jid)).state === "running", 15_000, "ts.slow running");
  assert.deepEqual(await client.cancel(slow.jid), { cancelled: false, cancel_requested: true });
  await until(async () => (await client.getJob(slow.jid)).state === "cancelled", 15_000, "ts.slow cancelled");

  for (const [n, { jid }] of results.entries()) {
    const job = await until(async () => {
      const job = await client.getJob(jid);
      return job.state === "done" && job;
    }, 15_000, `job ${n} done`);
    assert.deepEqual(job.result, { echoed: { n }, attempt: 1 });
  }
  const dead = await until(async () => {
    const job = await client.getJob(failing.jid);
    return job.state === "failed" && job;
  }, 15_000, "ts.fail dead-lettered");
  assert.equal(dead.status, "error");
  assert.match(dead.last_error.message, /no such address/);
  assert.equal(dead.last_error.exception_class, "PermanentFailure");
  } finally {
    worker.stop();
  }
  const stats = await running;
  assert.deepEqual(stats, { claimed: 22, done: 20, failed: 1, cancelled: 1, leaseLost: 0 });
  assert.equal(new Set(ran).size, 20);
  assert.equal(ran.length, 20);
  assert.ok(logger.lines.some((line) => line.startsWith(`info registered ${worker.name}`)), logger.lines.join("\n"));
  // The worker reported its clean stop: a second report finds it stopped already.
  assert.deepEqual(await client.stopWorker(worker.name), { name: worker.name, stopped: false });
});

test("a lost lease drops the outcome: the complete answers 409 and the new holder's report stands", { timeout: 60_000 }, async () => {
  const { jid } = await client.enqueue("ts.lease", { n: 1 });
  const logger = memoryLogger();
  // A 1 s lease and no heartbeat while the handler runs: the lease expires, the
  // claim route reaps it and the test's own claim gets the job again. The handler
  // returns only once that claim is in: the claim route reaps at most every
  // LEASE_MS / 2 (5 s on this gateway), so a handler that returned after a fixed 4 s
  // could report before any reap, under its still-valid token.
  let reclaimed;
  const reclaim = new Promise((ok) => (reclaimed = ok));
  const worker = new Worker(
    { "ts.lease": async () => (await reclaim, "from the worker") },
    { url: gateway.url, token, queues: ["ts-lease"], waitMs: 500, leaseMs: 1000, heartbeatMs: 60_000, handleSignals: false, logger },
  );
  const running = worker.run();
  try {
  await until(async () => (await client.getJob(jid)).state === "running", 15_000, "ts.lease running");
  // The claim route reaps expired leases as a claim starts: claim again and again.
  // A long lease of its own: the worker, still polling, must not reap this claim in
  // turn before the test reports (under load its report can take seconds).
  const [again] = await until(() => client.claim({ queues: ["ts-lease"], jobTypes: ["ts.lease"], waitMs: 200, leaseMs: 60_000 }).then((jobs) => jobs.length && jobs), 15_000, "the job claimed again");
  assert.equal(again.jid, jid);
  assert.equal(again.attempt, 2);
  reclaimed();
  await until(() => worker.stats.leaseLost === 1, 15_000, "the worker's report refused");
  assert.ok(logger.lines.some((line) => line.includes(`job ${jid} (ts.lease): lease lost`)), logger.lines.join("\n"));
  assert.deepEqual(await client.complete(jid, again.lease_token, "from the test"), { status: "done" });
  assert.equal((await client.getJob(jid)).result, "from the test");
  } finally {
    reclaimed();
    worker.stop();
  }
  assert.deepEqual(await running, { claimed: 1, done: 0, failed: 0, cancelled: 0, leaseLost: 1 });
});

test("a stop does not abandon a claim in flight: the job it brings runs to done", { timeout: 60_000 }, async () => {
  // An aborted long-poll would leave the server's claim waiting: the job enqueued
  // after the stop would be leased to no one (running) until its lease expired.
  const logger = memoryLogger();
  const ran = [];
  const worker = new Worker(
    { "ts.drain": async (payload, ctx) => (ran.push(ctx.jid), "drained") },
    { url: gateway.url, token, queues: ["ts-drain"], waitMs: 10_000, handleSignals: false, logger },
  );
  const running = worker.run();
  await until(() => logger.lines.some((line) => line.includes("registered")), 15_000, "the worker registered");
  await sleep(500); // its claim reached the gateway and waits there
  worker.stop();
  const { jid } = await client.enqueue("ts.drain", { n: 1 });
  const stats = await running;
  assert.deepEqual(ran, [jid]);
  assert.deepEqual(stats, { claimed: 1, done: 1, failed: 0, cancelled: 0, leaseLost: 0 });
  const job = await client.getJob(jid);
  assert.equal(job.state, "done");
  assert.equal(job.result, "drained");
});

function startCli(args) {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, JQ_URL: gateway.url, JQ_TOKEN: token },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderrText = "";
  child.stderr.on("data", (chunk) => (child.stderrText += chunk));
  child.exited = new Promise((ok) => child.once("exit", (code, signal) => ok({ code, signal })));
  return child;
}

test("worker-cli finishes its running jobs on SIGTERM, claims no more, exits 0", { timeout: 60_000 }, async () => {
  const handlers = join(HERE, "fixtures/handlers.mjs");
  const child = startCli(["--handlers", handlers, "--queues", "ts-cli", "--concurrency", "3", "--wait-ms", "1000"]);
  try {
    await until(() => child.stderrText.includes("registered"), 15_000, "worker-cli registered");
    const jobs = await client.enqueueBatch([1, 2, 3].map((n) => ({ jobType: "ts.cli", payload: { n, ms: 1500 } })));
    await until(
      async () => (await Promise.all(jobs.map(({ jid }) => client.getJob(jid)))).every((job) => job.state === "running"),
      15_000,
      "three ts.cli jobs running",
    );
    const waiting = await client.enqueue("ts.cli", { n: 4 });
    child.kill("SIGTERM");
    let timer;
    const timeout = new Promise((ok) => (timer = setTimeout(() => ok({ code: "no exit within 20 s" }), 20_000)));
    const { code } = await Promise.race([child.exited, timeout]);
    clearTimeout(timer);
    assert.equal(code, 0, child.stderrText);
    for (const [n, { jid }] of jobs.entries()) {
      const job = await client.getJob(jid);
      assert.equal(job.state, "done", JSON.stringify(job));
      assert.deepEqual(job.result, { echoed: { n: n + 1, ms: 1500 } });
    }
    assert.equal((await client.getJob(waiting.jid)).state, "waiting");
    assert.match(child.stderrText, /SIGTERM received/);
    assert.match(child.stderrText, /stopped: claimed=3 done=3 failed=0/);
  } finally {
    child.kill("SIGKILL");
  }
});

test("worker-cli refuses a call without --handlers with exit status 2 and the usage", { timeout: 15_000 }, async () => {
  const child = startCli(["--queues", "ts-cli"]);
  const { code } = await child.exited;
  assert.equal(code, 2);
  assert.match(child.stderrText, /--handlers \(or JQ_HANDLERS\) is required/);
  assert.match(child.stderrText, /usage: worker-cli\.js --handlers FILE --queues a,b/);
});
