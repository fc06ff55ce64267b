// The producer calls and the error mapping, against a live gateway.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Client,
  DuplicateJob,
  Forbidden,
  GatewayError,
  InvalidRequest,
  LeaseLost,
  NotFound,
  ProRequired,
  Unauthorized,
  Unavailable,
} from "../dist/index.js";
import { startGateway } from "./gateway.mjs";

let gateway;
let client; // produce, read, work on every queue
let admin;

before(async () => {
  gateway = await startGateway();
  const [all, adminToken] = await Promise.all([gateway.token(), gateway.token({ scopes: "admin", name: "ts-admin" })]);
  client = new Client({ url: gateway.url, token: all });
  admin = new Client({ url: `${gateway.url}/sdk/`, token: adminToken });
});

after(async () => {
  await gateway?.stop();
});

describe("producer calls", () => {
  test("enqueue stores the job with its options; getJob shows it", async () => {
    const answer = await client.enqueue("ts.echo", { to: "a@example.com" }, { priority: 3, maxRetry: 2, delay: "1m" });
    assert.equal(answer.status, "enqueued");
    assert.match(answer.jid, /^\w+$/);
    const job = await client.getJob(answer.jid);
    assert.equal(job.jid, answer.jid);
    assert.equal(job.job_type, "ts.echo");
    assert.equal(job.queue, "ts");
    assert.deepEqual(job.payload, { to: "a@example.com" });
    assert.equal(job.priority, 3);
    assert.equal(job.max_retry, 2);
    assert.equal(job.state, "scheduled");
    assert.ok(Date.parse(job.run_at) > Date.now() + 30_000, job.run_at);
  });

  test("enqueue with a unique key answers deduplicated with the holder's jid", async () => {
    const first = await client.enqueue("ts.echo", 1, { uniqueKey: "dedup-1", runAt: new Date(Date.now() + 60_000) });
    const second = await client.enqueue("ts.echo", 2, { uniqueKey: "dedup-1" });
    assert.deepEqual(second, { status: "deduplicated", jid: first.jid });
  });

  test("enqueueBatch answers one result per job, in order, a duplicate in its slot", async () => {
    const held = await client.enqueue("ts.echo", 0, { uniqueKey: "batch-held", delay: 60 });
    const results = await client.enqueueBatch([
      { jobType: "ts.echo", payload: 1, delay: 60 },
      { jobType: "ts.echo", payload: 2, uniqueKey: "batch-held" },
      { jobType: "ts.echo", payload: 3, queue: "ts-other", delay: 60 },
    ]);
    assert.equal(results.length, 3);
    assert.equal(results[0].status, "enqueued");
    assert.deepEqual(results[1], { status: "deduplicated", jid: held.jid });
    assert.equal((await client.getJob(results[2].jid)).queue, "ts-other");
  });

  test("a batch with one invalid job is refused with its index and field, nothing stored", async () => {
    const before = await client.ids.list("ts-batch");
    await assert.rejects(
      client.enqueueBatch([
        { jobType: "ts.echo", queue: "ts-batch", id: "b1" },
        { jobType: "ts.echo", queue: "ts-batch", priority: 0 },
      ]),
      (error) => error instanceof InvalidRequest && error.status === 422 && error.index === 1 && error.field === "jobs[1].priority",
    );
    assert.deepEqual(await client.ids.list("ts-batch"), before);
    assert.equal(await client.ids.get("ts-batch", "b1"), null);
  });

  test("a Pro unique mode without a licence is ProRequired (402)", async () => {
    await assert.rejects(
      client.enqueue("ts.echo", null, { uniqueKey: "pro", uniqueMode: "until_executed" }),
      (error) => error instanceof ProRequired && error.status === 402 && error.code === "pro_required",
    );
  });

  test("enqueue with a held id is DuplicateJob (409) naming the holder", async () => {
    const first = await client.enqueue("ts.echo", null, { id: "dup-1", delay: 60 });
    await assert.rejects(
      client.enqueue("ts.echo", null, { id: "dup-1" }),
      (error) => error instanceof DuplicateJob && error.status === 409 && error.jid === first.jid,
    );
  });

  test("cancel stops a waiting job", async () => {
    const { jid } = await client.enqueue("ts.echo", null, { delay: 60, queue: "ts-cancel" });
    assert.deepEqual(await client.cancel(jid), { cancelled: true, cancel_requested: false });
    assert.equal((await client.getJob(jid)).state, "cancelled");
  });

  test("retry (admin) makes a dead letter due again", async () => {
    const { jid } = await client.enqueue("ts.fail", "x", { queue: "ts-retry" });
    const [job] = await client.claim({ queues: ["ts-retry"], jobTypes: ["ts.fail"], waitMs: 2000 });
    assert.equal(job.jid, jid);
    assert.deepEqual(await client.fail(jid, job.lease_token, { error: "boom", exceptionClass: "Error", retry: false }), { status: "error" });
    const dead = await client.getJob(jid);
    assert.equal(dead.state, "failed");
    assert.equal(dead.last_error.message, "Error: boom");
    assert.equal(dead.last_error.exception_class, "Error");
    assert.deepEqual(await admin.retry(jid), { retried: true });
    assert.equal((await client.getJob(jid)).state, "waiting");
    await assert.rejects(client.retry(jid), (error) => error instanceof Forbidden && error.body.scope === "admin");
  });

  test("getJob of an unknown jid is NotFound (404)", async () => {
    await assert.rejects(client.getJob("nosuchjob"), (error) => error instanceof NotFound && error.code === "not_found");
  });
});

describe("id verbs", () => {
  const queue = "ts-ids";

  test("add, add again, get, update, set, list, cancel", async () => {
    assert.deepEqual(await client.ids.add(queue, "user/1", { value: { n: 1 }, jobType: "ts.echo", delay: 60 }), { added: true });
    assert.deepEqual(await client.ids.add(queue, "user/1", { value: { n: 9 }, jobType: "ts.echo" }), { added: false });
    let job = await client.ids.get(queue, "user/1");
    assert.equal(job.id, "user/1");
    assert.deepEqual(job.value, { n: 1 });
    assert.equal(job.state, "scheduled");

    assert.deepEqual(await client.ids.update(queue, "user/1", { value: { n: 2 }, delay: 120 }), { updated: true });
    assert.deepEqual((await client.ids.get(queue, "user/1")).value, { n: 2 });
    assert.deepEqual(await client.ids.update(queue, "user/none", { value: 1, jobType: "ts.echo" }), { updated: false });

    assert.deepEqual(await client.ids.set(queue, "user/2", { value: "x", jobType: "ts.echo", at: new Date(Date.now() + 60_000) }), { set: true });
    assert.deepEqual(await client.ids.set(queue, "user/3", { value: "y", jobType: "ts.echo", delay: 60 }), { set: true });

    const page = await client.ids.list(queue, { prefix: "user/", limit: 2 });
    assert.deepEqual(page.jobs.map((j) => j.id), ["user/1", "user/2"]);
    assert.ok(page.next);
    const rest = await client.ids.list(queue, { prefix: "user/", limit: 2, cursor: page.next });
    assert.deepEqual(rest.jobs.map((j) => j.id), ["user/3"]);
    assert.equal(rest.next, null);
    assert.deepEqual((await client.ids.list(queue, { state: "scheduled" })).jobs.length, 3);

    assert.deepEqual(await client.ids.cancel(queue, "user/1"), { cancelled: true });
    job = await client.ids.get(queue, "user/1");
    assert.ok(job === null || job.state === "cancelled", JSON.stringify(job));
    assert.deepEqual(await client.ids.cancel(queue, "user/none"), { cancelled: false });
    assert.equal(await client.ids.get(queue, "user/none"), null);
  });
});

describe("error mapping", () => {
  test("a bad token is Unauthorized (401)", async () => {
    const bad = new Client({ url: gateway.url, token: "jqt_" + "x".repeat(43) });
    await assert.rejects(bad.enqueue("ts.echo"), (error) => error instanceof Unauthorized && error.status === 401 && error.code === "unauthorized");
  });

  test("a token without the scope is Forbidden (403) naming it", async () => {
    const reader = new Client({ url: gateway.url, token: await gateway.token({ scopes: "read", name: "ts-reader" }) });
    await assert.rejects(
      reader.enqueue("ts.echo"),
      (error) => error instanceof Forbidden && error.status === 403 && error.body.scope === "produce",
    );
  });

  test("a token not allowed the queue is Forbidden (403)", async () => {
    const narrow = new Client({ url: gateway.url, token: await gateway.token({ queues: "emails*", name: "ts-narrow" }) });
    assert.equal((await narrow.enqueue("ts.echo", null, { queue: "emails-x", delay: 60 })).status, "enqueued");
    await assert.rejects(narrow.enqueue("ts.echo", null, { queue: "ts" }), (error) => error instanceof Forbidden && error.status === 403);
  });

  test("an invalid job is InvalidRequest (422) naming the field", async () => {
    await assert.rejects(
      client.enqueue("ts.echo", null, { maxRetry: -1 }),
      (error) =>
        error instanceof InvalidRequest &&
        error instanceof GatewayError &&
        error.status === 422 &&
        error.code === "invalid_request" &&
        error.field === "max_retry" &&
        error.detail.length > 0,
    );
    await assert.rejects(client.enqueue("no.such.type"), (error) => error instanceof InvalidRequest && error.field === "job_type");
  });

  test("a report on a job no longer held is LeaseLost (409)", async () => {
    const { jid } = await client.enqueue("ts.echo", "x", { queue: "ts-409" });
    const [job] = await client.claim({ queues: ["ts-409"], jobTypes: ["ts.echo"], waitMs: 2000 });
    assert.equal(job.jid, jid);
    await assert.rejects(client.complete(jid, "not-the-token", 1), (error) => error instanceof LeaseLost && error.status === 409 && error.code === "lease_lost");
    assert.deepEqual(await client.complete(jid, job.lease_token, { ok: 1 }), { status: "done" });
    await assert.rejects(client.complete(jid, job.lease_token, 2), LeaseLost);
    await assert.rejects(client.heartbeat(jid, job.lease_token), LeaseLost);
    assert.deepEqual((await client.getJob(jid)).result, { ok: 1 });
  });

  test("an unreachable gateway is Unavailable with status 0", async () => {
    const down = new Client({ url: "http://127.0.0.1:9", token: "jqt_x", timeoutMs: 2000 });
    await assert.rejects(down.getJob("x"), (error) => error instanceof Unavailable && error.status === 0 && error.code === "connection_failed");
  });
});
