// The client's bulk action by filter and a job's progress, against a live licensed
// gateway: `bulk` retries what the filter selects (the Worker then runs it to done),
// refuses a bad term with a 422 naming it and a token without the admin scope with a
// 403; progress sent with a heartbeat, and by a handler's `ctx.progress`, is stored
// on the running job (docs/console.md "Search syntax" and "Progress").

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, Forbidden, InvalidRequest, Worker } from "../dist/index.js";
import { memoryLogger, proSettings, startGateway, until } from "./gateway.mjs";

let gateway;
let token; // produce, read, work on every queue
let client;
let admin;

before(async () => {
  gateway = await startGateway({ jobqueue: await proSettings() });
  const [all, adminToken] = await Promise.all([gateway.token(), gateway.token({ scopes: "admin", name: "ts-admin" })]);
  token = all;
  client = new Client({ url: gateway.url, token });
  admin = new Client({ url: gateway.url, token: adminToken });
});

after(async () => {
  await gateway?.stop();
});

/** The stored `progress` of job `jid`, read by another process on the gateway's database. */
async function storedProgress(jid) {
  const code = [
    "import json",
    "from django_jobqueue.models import Job",
    `print("PROGRESS=" + json.dumps(Job.objects.get(jid=${JSON.stringify(jid)}).progress))`,
  ].join("\n");
  const out = await gateway.manage(["shell", "-c", code]);
  const line = out.split("\n").find((text) => text.startsWith("PROGRESS="));
  return JSON.parse(line.slice("PROGRESS=".length));
}

/** Enqueue a ts.bulk job with `payload`, claim it and fail it for good; resolves its jid. */
async function deadLetter(payload) {
  const { jid } = await client.enqueue("ts.bulk", payload);
  const claimed = await until(async () => (await client.claim({ queues: ["ts-bulk"], limit: 1 }))[0], 15_000, "a claim");
  assert.equal(claimed.jid, jid);
  const answer = await client.fail(jid, claimed.lease_token, { error: "smtp down", retry: false });
  assert.ok(["error", "max_retry"].includes(answer.status), answer.status);
  assert.equal((await client.getJob(jid)).state, "failed");
  return jid;
}

describe("bulk by filter", () => {
  test("retry selects by payload field and state; the Worker then runs the retried job to done", { timeout: 120_000 }, async () => {
    const wanted = await deadLetter({ customer_id: 42 });
    const other = await deadLetter({ customer_id: 7 });

    const answer = await admin.bulk("retry", "queue:ts-bulk state:failed payload.customer_id:42");
    assert.deepEqual(answer, { action: "retry", changed: 1, detail: { dead: 1, waiting: 0 } });
    assert.equal((await client.getJob(wanted)).state, "waiting");
    assert.equal((await client.getJob(other)).state, "failed");

    const ran = [];
    const worker = new Worker(
      { "ts.bulk": (payload, ctx) => (ran.push(ctx.jid), { ok: payload.customer_id }) },
      { url: gateway.url, token, queues: ["ts-bulk"], waitMs: 500, handleSignals: false, logger: memoryLogger() },
    );
    const running = worker.run();
    try {
      await until(async () => (await client.getJob(wanted)).state === "done", 30_000, "the retried job done");
    } finally {
      worker.stop();
      await running;
    }
    assert.deepEqual(ran, [wanted]);
    assert.deepEqual((await client.getJob(wanted)).result, { ok: 42 });
    assert.equal((await client.getJob(other)).state, "failed");
  });

  test("a bad term is InvalidRequest (422) naming it; nothing changes", async () => {
    const dead = await deadLetter({ customer_id: 9 });
    await assert.rejects(
      admin.bulk("retry", "queue:ts-bulk colour:red"),
      (error) => error instanceof InvalidRequest && error.status === 422 && error.message.includes("colour:red"),
    );
    assert.equal((await client.getJob(dead)).state, "failed");
  });

  test("a token without the admin scope is Forbidden (403)", async () => {
    await assert.rejects(client.bulk("retry", "queue:ts-bulk"), (error) => error instanceof Forbidden && error.status === 403);
  });

  test("cancel and delete answer their own counts", async () => {
    const waiting = await client.enqueue("ts.bulk", { customer_id: 5 }, { queue: "ts-bulk-2", delay: "1h" });
    const cancelled = await admin.bulk("cancel", "queue:ts-bulk-2 payload.customer_id:5");
    assert.equal(cancelled.action, "cancel");
    assert.equal(cancelled.changed, 1);
    assert.equal((await client.getJob(waiting.jid)).state, "cancelled");
    const deleted = await admin.bulk("delete", "queue:ts-bulk-2");
    assert.deepEqual([deleted.action, deleted.changed], ["delete", 1]);
    await assert.rejects(client.getJob(waiting.jid), (error) => error.status === 404);
  });
});

describe("progress", () => {
  test("a heartbeat's progress is stored on the running job; done over total is a 422", { timeout: 60_000 }, async () => {
    const { jid } = await client.enqueue("ts.progress", { n: 1 });
    const [job] = await until(() => client.claim({ queues: ["ts-progress"], limit: 1 }).then((jobs) => jobs.length && jobs), 15_000, "a claim");
    assert.equal(job.jid, jid);
    await client.heartbeat(jid, job.lease_token, undefined, { done: 2, total: 5, message: "two of five" });
    assert.deepEqual(await storedProgress(jid), { done: 2, total: 5, message: "two of five" });
    await assert.rejects(
      client.heartbeat(jid, job.lease_token, undefined, { done: 6, total: 5 }),
      (error) => error instanceof InvalidRequest && error.status === 422,
    );
    await client.complete(jid, job.lease_token, null);
  });

  test("ctx.progress from a handler reaches the job while it runs", { timeout: 120_000 }, async () => {
    let release;
    const released = new Promise((ok) => (release = ok));
    const worker = new Worker(
      {
        "ts.progress": async (payload, ctx) => {
          for (let done = 1; done <= 3; done += 1) ctx.progress(done, 3, `step ${done}`);
          await released;
          return "ok";
        },
      },
      { url: gateway.url, token, queues: ["ts-progress"], waitMs: 500, handleSignals: false, logger: memoryLogger() },
    );
    const { jid } = await client.enqueue("ts.progress", { n: 2 });
    const running = worker.run();
    try {
      // The last report wins: the reports of one second are sent as one, the latest.
      const stored = await until(async () => {
        const progress = await storedProgress(jid);
        return progress?.done === 3 && progress;
      }, 60_000, "the job's progress 3 of 3");
      assert.deepEqual(stored, { done: 3, total: 3, message: "step 3" });
      assert.equal((await client.getJob(jid)).state, "running");
    } finally {
      release();
      await until(async () => (await client.getJob(jid)).state === "done", 30_000, "the job done");
      worker.stop();
      await running;
    }
  });
});
