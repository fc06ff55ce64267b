// Batches and workflows from Node: enqueueWorkflow, getWorkflow, getBatch, and
// enqueue's batch and after, against a live gateway.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, Forbidden, InvalidRequest, NotFound } from "../dist/index.js";
import { startGateway } from "./gateway.mjs";

const QUEUE = "ts-flow";
let gateway;
let client; // produce, read, work on every queue

before(async () => {
  gateway = await startGateway();
  client = new Client({ url: gateway.url, token: await gateway.token() });
});

after(async () => {
  await gateway?.stop();
});

/** Claim and complete one due job of QUEUE; return its jid (null when none is due). */
async function runOne() {
  const [job] = await client.claim({ queues: [QUEUE], jobTypes: ["ts.echo"], waitMs: 200 });
  if (!job) return null;
  await client.complete(job.jid, job.lease_token, { ran: job.payload });
  return job.jid;
}

const step = (name, after = [], extra = {}) => ({ name, jobType: "ts.echo", queue: QUEUE, payload: { step: name }, after, ...extra });

describe("workflows", () => {
  test("enqueueWorkflow builds the graph; getWorkflow follows it to done, fan-in last", async () => {
    const result = await client.enqueueWorkflow("images", [
      step("merge", ["a", "b", "c"]),
      step("a", ["fetch"]),
      step("b", ["fetch"], { priority: 2 }),
      step("c", ["fetch"], { onUpstreamFailure: "ignore" }),
      step("fetch"),
    ]);
    assert.equal(result.name, "images");
    assert.ok(Number.isInteger(result.id) && result.id > 0);
    assert.deepEqual(Object.keys(result.jids).sort(), ["a", "b", "c", "fetch", "merge"]);

    let flow = await client.getWorkflow(result.id);
    assert.equal(flow.total, 5);
    assert.equal(flow.pending, 5);
    assert.equal(flow.finished_at, null);
    const states = () => Object.fromEntries(flow.steps.map((s) => [s.name, s.state]));
    assert.deepEqual(states(), { merge: "blocked", a: "blocked", b: "blocked", c: "blocked", fetch: "waiting" });
    assert.deepEqual(flow.steps.find((s) => s.name === "merge").after.sort(), ["a", "b", "c"]);
    assert.equal((await client.getJob(result.jids.merge)).state, "blocked");

    const order = [];
    for (let jid = await runOne(); jid; jid = await runOne()) order.push(jid);
    assert.equal(order.length, 5);
    assert.equal(order[0], result.jids.fetch);
    assert.equal(order[4], result.jids.merge);

    flow = await client.getWorkflow(result.id);
    assert.equal(flow.done, 5);
    assert.equal(flow.pending, 0);
    assert.ok(flow.finished_at);
    assert.ok(flow.steps.every((s) => s.state === "done"));
  });

  test("a cycle is an InvalidRequest naming the step; nothing is stored", async () => {
    const error = await client
      .enqueueWorkflow("loop", [step("a", ["c"]), step("b", ["a"]), step("c", ["b"])])
      .then(() => null, (e) => e);
    assert.ok(error instanceof InvalidRequest, String(error));
    assert.equal(error.status, 422);
    assert.match(error.field, /^steps\[\d\]\.after$/);
    assert.match(error.message, /cycle/);
    const unknown = await client.enqueueWorkflow("bad", [step("a", ["nope"])]).then(() => null, (e) => e);
    assert.ok(unknown instanceof InvalidRequest);
    assert.equal(unknown.field, "steps[0].after");
  });

  test("enqueue after waits for its upstream job; a missing one is refused", async () => {
    const first = await client.enqueue("ts.echo", 1, { queue: QUEUE });
    const second = await client.enqueue("ts.echo", 2, { queue: QUEUE, after: [first.jid], onUpstreamFailure: "skip" });
    assert.equal((await client.getJob(second.jid)).state, "blocked");
    assert.equal(await runOne(), first.jid);
    assert.equal((await client.getJob(second.jid)).state, "waiting");
    assert.equal(await runOne(), second.jid);
    const error = await client.enqueue("ts.echo", 3, { queue: QUEUE, after: ["0".repeat(32)] }).then(() => null, (e) => e);
    assert.ok(error instanceof InvalidRequest);
    assert.equal(error.field, "after");
  });
});

describe("batches", () => {
  test("a job joins an open batch; getBatch counts it and shows the callback once made", async () => {
    const out = await gateway.manage([
      "shell",
      "-c",
      [
        "import django_jobqueue as jq",
        "with jq.batch(on_finish='ts.echo', queue='" + QUEUE + "') as b:",
        "    jq.enqueue_job('" + QUEUE + "', 'ts.echo', {'n': 0})",
        "print(b.id)",
      ].join("\n"),
    ]);
    const id = Number(out.trim().split("\n").pop());
    assert.ok(id > 0, out);
    const joined = await client.enqueue("ts.echo", { n: 1 }, { queue: QUEUE, batch: id });
    assert.equal(joined.status, "enqueued");

    let batch = await client.getBatch(id);
    assert.equal(batch.id, id);
    assert.equal(batch.total, 2);
    assert.equal(batch.pending, 2);
    assert.equal(batch.sealed, true);
    assert.deepEqual(batch.on_finish, { job_type: "ts.echo", jid: "" });
    assert.equal(batch.on_success, null);

    assert.ok(await runOne());
    assert.ok(await runOne());
    batch = await client.getBatch(id);
    assert.equal(batch.done, 2);
    assert.ok(batch.finished_at);
    assert.match(batch.on_finish.jid, /^[0-9a-f]{32}$/);
    assert.equal((await client.getJob(batch.on_finish.jid)).job_type, "ts.echo");
    assert.equal(await runOne(), batch.on_finish.jid); // the callback, on the batch's queue
  });

  test("openBatch, jobs joined by enqueue, sealBatch: the callback is made at the seal", async () => {
    const opened = await client.openBatch({ onFinish: { jobType: "ts.echo", payload: { report: true }, options: { priority: 4 } }, queue: QUEUE });
    assert.equal(opened.sealed, false);
    assert.deepEqual(opened.on_finish, { job_type: "ts.echo", jid: "" });
    await client.enqueue("ts.echo", 1, { queue: QUEUE, batch: opened.id });
    await client.enqueue("ts.echo", 2, { queue: QUEUE, batch: opened.id });
    assert.ok(await runOne());
    assert.ok(await runOne());
    let batch = await client.getBatch(opened.id);
    assert.equal(batch.pending, 0);
    assert.equal(batch.finished_at, null); // not sealed yet
    batch = await client.sealBatch(opened.id);
    assert.equal(batch.sealed, true);
    assert.ok(batch.finished_at);
    const callback = await client.getJob(batch.on_finish.jid);
    assert.equal(callback.priority, 4);
    assert.deepEqual(callback.payload.payload, { report: true });
    assert.equal(await runOne(), batch.on_finish.jid);
    await assert.rejects(client.enqueue("ts.echo", 3, { queue: QUEUE, batch: opened.id }), InvalidRequest); // finished
  });

  test("unknown ids are NotFound; a bad id is a TypeError; read needs the read scope", async () => {
    await assert.rejects(client.getBatch(987654321), NotFound);
    await assert.rejects(client.getWorkflow(987654321), NotFound);
    await assert.rejects(client.getBatch(0), TypeError);
    const producer = new Client({ url: gateway.url, token: await gateway.token({ scopes: "produce", name: "ts-produce" }) });
    const flow = await client.enqueueWorkflow("scoped", [step("only")]);
    await assert.rejects(producer.getWorkflow(flow.id), Forbidden);
    await assert.rejects(client.enqueue("ts.echo", 1, { queue: QUEUE, batch: 987654321 }), InvalidRequest);
  });
});
