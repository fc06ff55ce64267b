// A paused queue hands out no job to the TypeScript Worker, whatever the timing: a job
// enqueued right after a pause made in another process (as `manage.py jobqueue pause`
// is) waits until the resume, though the gateway's own cache of pauses is up to half
// a second old then and the Worker keeps a long-poll claim waiting (docs/design.md,
// "Execution").

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, Worker } from "../dist/index.js";
import { memoryLogger, startGateway, until } from "./gateway.mjs";

const QUEUE = "ts-pause";
const ROUNDS = 3;

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

/** Pause QUEUE and enqueue `count` ts.pause jobs at once, in one other process; resolves their jids. */
async function pauseThenEnqueue(round, count) {
  const code = [
    "from django_jobqueue import enqueue_job",
    "from django_jobqueue.store.pauses import pause_queue",
    `assert pause_queue("default", ${JSON.stringify(QUEUE)}, by="test")`,
    `for i in range(${count}): print(enqueue_job(${JSON.stringify(QUEUE)}, "ts.pause", {"round": ${round}, "i": i}).jid)`,
  ].join("\n");
  const out = await gateway.manage(["shell", "-c", code]);
  // The jids alone: `shell` may print a line of its own (the models it imported).
  return out.split("\n").map((line) => line.trim()).filter((line) => /^[0-9a-f]{32}$/.test(line));
}

/** A client whose answered claims are counted: the Worker's claims go through it. */
function countingClient() {
  const counted = new Client({ url: gateway.url, token });
  const claim = counted.claim.bind(counted);
  counted.claims = 0;
  counted.claim = async (...args) => {
    const jobs = await claim(...args);
    counted.claims += 1;
    return jobs;
  };
  return counted;
}

test("the Worker runs no job of a paused queue until the resume", { timeout: 180_000 }, async () => {
  const ran = [];
  const counted = countingClient();
  const worker = new Worker(
    { "ts.pause": (payload, ctx) => (ran.push(ctx.jid), payload) },
    { url: gateway.url, token, queues: [QUEUE], concurrency: 4, waitMs: 1000, handleSignals: false, logger: memoryLogger(), client: counted },
  );
  const running = worker.run();
  try {
    await until(() => counted.claims >= 1, 30_000, "the worker claiming");
    for (let round = 0; round < ROUNDS; round++) {
      const jids = await pauseThenEnqueue(round, 2);
      assert.equal(jids.length, 2);
      // Two claims begun after the jobs were committed, each finding them due.
      const seen = counted.claims;
      await until(() => counted.claims >= seen + 3, 30_000, `round ${round}: three more claims`);
      assert.deepEqual(ran, [], `round ${round}: run during the pause`);
      for (const jid of jids) {
        assert.equal((await client.getJob(jid)).state, "waiting");
      }
      await gateway.manage(["jobqueue", "resume", QUEUE]);
      await until(
        async () => (await Promise.all(jids.map((jid) => client.getJob(jid)))).every((job) => job.state === "done"),
        30_000,
        `round ${round}: both jobs done after the resume`,
      );
      assert.deepEqual([...ran].sort(), [...jids].sort());
      ran.length = 0;
    }
  } finally {
    worker.stop();
    await gateway.manage(["jobqueue", "resume", QUEUE]);
  }
  const stats = await running;
  assert.equal(stats.done, 2 * ROUNDS);
});

test("a long-poll claim waiting during a pause answers no job", { timeout: 120_000 }, async () => {
  // Long enough to still wait when the other process has paused and enqueued.
  // A rejection is kept as the answer, so none is left unhandled if a step fails.
  const waiting = client
    .claim({ queues: [QUEUE], jobTypes: ["ts.pause"], waitMs: 10_000, limit: 5 })
    .catch((error) => error);
  const [jid] = await pauseThenEnqueue(99, 1);
  assert.deepEqual(await waiting, []);
  assert.equal((await client.getJob(jid)).state, "waiting");
  await gateway.manage(["jobqueue", "resume", QUEUE]);
  const claimed = await client.claim({ queues: [QUEUE], jobTypes: ["ts.pause"], waitMs: 3000, limit: 5 });
  assert.deepEqual(claimed.map((job) => job.jid), [jid]);
  await client.complete(jid, claimed[0].lease_token, null);
});
