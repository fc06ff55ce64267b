/**
 * A worker loop over the gateway's worker protocol (docs/gateway.md): register,
 * long-poll claims, run handlers with bounded concurrency, heartbeat each running
 * job, report complete or fail, stop gracefully on SIGTERM/SIGINT.
 */

import { hostname } from "node:os";

import { Client, type ClaimedJob, type Progress } from "./client.js";

/** The shortest time between two progress reports of one job sent, ms. */
const PROGRESS_INTERVAL_MS = 1_000;
import { GatewayError, LeaseLost, RateLimited, Unavailable } from "./errors.js";

/** What a handler gets beside the payload. */
export interface JobContext {
  readonly jid: string;
  readonly queue: string;
  readonly jobType: string;
  /** The id the job holds (docs/design.md#ids), or null. */
  readonly id: string | null;
  /** 1 on the first run. */
  readonly attempt: number;
  readonly maxRetry: number;
  /** The job's timeout, ms: past it the attempt fails (and its signal aborts). */
  readonly timeoutMs: number;
  /** True once a heartbeat answered `cancel_requested`: stop and throw. */
  readonly cancelRequested: boolean;
  /** Aborted on a cancel request, a lost lease, or the job's timeout. */
  readonly signal: AbortSignal;
  /** The raw claimed job. */
  readonly job: ClaimedJob;
  /**
   * Report how far the job got: `done` of `total` units (0: unknown). Sends nothing
   * itself: the latest report goes with a heartbeat, at most once a second. Throws a
   * RangeError unless both are integers >= 0 and `done` <= a known `total`.
   */
  progress(done: number, total: number, message?: string | null): void;
}

/** A job handler: its resolved value is the job's JSON result. */
export type Handler = (payload: any, ctx: JobContext) => unknown | Promise<unknown>;

/** Job type to handler. */
export type Handlers = Record<string, Handler>;

/** Where the worker's messages go (default: stderr). */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** A worker's options; `url`, `token`, `queues` are required. */
export interface WorkerOptions {
  url: string;
  token: string;
  queues: string[];
  /** Jobs run at once (default 1). */
  concurrency?: number;
  /** The registered name (default `<host>-<pid>-ts`). */
  name?: string;
  /** A claim's long-poll, ms (default 5000; the gateway caps it at 30000); also the longest a stop waits for a claim in flight, whose jobs then run. */
  waitMs?: number;
  /** Lease asked for each claim and heartbeat, ms (default: the site's LEASE_MS). */
  leaseMs?: number;
  /** Heartbeat interval, ms (default: the registration's `heartbeat_ms`). */
  heartbeatMs?: number;
  /** Stop on SIGTERM and SIGINT (default true). */
  handleSignals?: boolean;
  logger?: Logger;
  /** A client to use instead of one made from url and token. */
  client?: Client;
}

/** Counts of one run, resolved by {@link Worker.run}. */
export interface WorkerStats {
  claimed: number;
  done: number;
  failed: number;
  cancelled: number;
  /** Outcomes dropped on 409 `lease_lost`. */
  leaseLost: number;
}

/** Throw it (or any error with `retry: false`) to dead-letter the job at once. */
export class PermanentFailure extends Error {
  readonly retry = false;
}

const VERSION = "0.1.0";
const MAX_ERROR = 10_000;

const stderrLogger: Logger = {
  info: (message) => process.stderr.write(`jobqueue-worker: ${message}\n`),
  warn: (message) => process.stderr.write(`jobqueue-worker: WARNING ${message}\n`),
  error: (message) => process.stderr.write(`jobqueue-worker: ERROR ${message}\n`),
};

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });

function errorText(error: unknown): { message: string; name: string } {
  if (error instanceof Error) {
    // A subclass that does not set `name` still says "Error": its constructor names it.
    const name = error.name && error.name !== "Error" ? error.name : error.constructor?.name || error.name;
    return { message: (error.message || name).slice(0, MAX_ERROR), name: name.slice(0, 200) };
  }
  return { message: String(error).slice(0, MAX_ERROR), name: typeof error };
}

class Context implements JobContext {
  cancelRequested: boolean;
  readonly controller = new AbortController();
  /** The latest report not sent yet, and when one was last sent (ms since epoch). */
  pendingProgress: Progress | null = null;
  progressSentAt = -Infinity;

  progress(done: number, total: number, message?: string | null): void {
    for (const [name, n] of [["done", done], ["total", total]] as const) {
      if (!Number.isInteger(n) || n < 0) throw new RangeError(`progress ${name} must be an integer >= 0, got ${n}`);
    }
    if (total && done > total) throw new RangeError(`progress done (${done}) must not exceed total (${total})`);
    this.pendingProgress = { done, total, message: message ? message.slice(0, 200) : null };
  }

  /** The report to send now (none within a second of the last one sent). */
  takeProgress(now: number): Progress | undefined {
    if (this.pendingProgress === null || now - this.progressSentAt < PROGRESS_INTERVAL_MS) return undefined;
    const report = this.pendingProgress;
    this.pendingProgress = null;
    this.progressSentAt = now;
    return report;
  }

  constructor(readonly job: ClaimedJob) {
    this.cancelRequested = job.cancel_requested;
  }

  get jid(): string {
    return this.job.jid;
  }
  get queue(): string {
    return this.job.queue;
  }
  get jobType(): string {
    return this.job.job_type;
  }
  get id(): string | null {
    return this.job.id;
  }
  get attempt(): number {
    return this.job.attempt;
  }
  get maxRetry(): number {
    return this.job.max_retry;
  }
  get timeoutMs(): number {
    return this.job.timeout_ms;
  }
  get signal(): AbortSignal {
    return this.controller.signal;
  }
}

/**
 * Runs gateway jobs with these handlers until stopped.
 *
 * ```ts
 * await new Worker({"emails.send": async (payload, ctx) => ...},
 *                  {url, token, queues: ["emails"], concurrency: 4}).run();
 * ```
 */
export class Worker {
  readonly client: Client;
  readonly name: string;
  readonly stats: WorkerStats = { claimed: 0, done: 0, failed: 0, cancelled: 0, leaseLost: 0 };
  private readonly handlers: Handlers;
  private readonly options: WorkerOptions;
  private readonly concurrency: number;
  private readonly logger: Logger;
  private readonly running = new Set<Promise<void>>();
  private readonly stopper = new AbortController();
  private readonly stopped = new Promise<void>((resolve) =>
    this.stopper.signal.addEventListener("abort", () => resolve(), { once: true }),
  );
  private heartbeatMs = 15_000;
  private leaseMs: number | undefined;
  private maxWaitMs = 30_000;

  /**
   * @param handlers job type to handler; the worker claims only these types
   * @param options see {@link WorkerOptions}
   * @throws TypeError when no handler, no queue, or a concurrency below 1 is given
   */
  constructor(handlers: Handlers, options: WorkerOptions) {
    const types = Object.keys(handlers);
    if (types.length === 0 || types.some((type) => typeof handlers[type] !== "function")) {
      throw new TypeError("Worker: handlers must map at least one job type to a function");
    }
    if (!options.queues?.length) {
      throw new TypeError("Worker: queues must name at least one queue");
    }
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 100) {
      throw new TypeError(`Worker: concurrency must be an integer 1..100, got ${concurrency}`);
    }
    this.handlers = handlers;
    this.options = options;
    this.concurrency = concurrency;
    this.logger = options.logger ?? stderrLogger;
    this.client = options.client ?? new Client({ url: options.url, token: options.token });
    this.name = options.name ?? `${hostname()}-${process.pid}-ts`;
  }

  /** Whether {@link stop} was called (or a signal came). */
  get stopping(): boolean {
    return this.stopper.signal.aborted;
  }

  /**
   * Stop claiming; {@link run} resolves once the running jobs have been reported. A
   * claim in flight is not abandoned: the stop waits for it (at most `waitMs`) and
   * runs the jobs it brings.
   */
  stop(): void {
    if (!this.stopping) {
      this.logger.info(`stopping: ${this.running.size} running job(s) finish first`);
      this.stopper.abort();
    }
  }

  /**
   * Register, then claim and run jobs until {@link stop} (or SIGTERM/SIGINT).
   *
   * @returns the run's counts, once every running job has been reported
   * @throws GatewayError when the gateway refuses the token (401, 403) or the
   *   registration; unreachable gateways and 503s are retried with backoff
   */
  async run(): Promise<WorkerStats> {
    const onSignal = (signal: string): void => {
      this.logger.info(`${signal} received`);
      this.stop();
    };
    if (this.options.handleSignals ?? true) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      const registration = await this.retrying(() =>
        this.client.register({
          name: this.name,
          host: hostname(),
          pid: process.pid,
          languages: ["typescript"],
          queues: this.options.queues,
          jobTypes: Object.keys(this.handlers),
          concurrency: this.concurrency,
          version: VERSION,
        }),
      );
      if (registration === undefined) {
        return this.stats;
      }
      this.leaseMs = this.options.leaseMs;
      this.heartbeatMs = this.options.heartbeatMs ?? registration.heartbeat_ms;
      this.maxWaitMs = registration.max_wait_ms;
      this.logger.info(
        `registered ${this.name}: queues=${this.options.queues.join(",")} ` +
          `job_types=${Object.keys(this.handlers).join(",")} concurrency=${this.concurrency}`,
      );
      await this.loop();
      await Promise.allSettled([...this.running]);
      // Gone from the console and `jobqueue status` at once, not three heartbeats later.
      await this.client.stopWorker(this.name).catch((error: unknown) => {
        this.logger.warn(`could not report the stop of ${this.name}: ${(error as Error).message}`);
      });
    } finally {
      await Promise.allSettled([...this.running]);
      if (this.options.handleSignals ?? true) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    const s = this.stats;
    this.logger.info(`stopped: claimed=${s.claimed} done=${s.done} failed=${s.failed} cancelled=${s.cancelled} lease_lost=${s.leaseLost}`);
    return this.stats;
  }

  /** Call `fn` until it answers; back off on an unreachable gateway, 503 or 429. */
  private async retrying<T>(fn: () => Promise<T>): Promise<T | undefined> {
    let backoff = 500;
    while (!this.stopping) {
      try {
        return await fn();
      } catch (error) {
        if (this.stopping && !(error instanceof GatewayError)) {
          return undefined; // stopping: an unreachable gateway is not tried again
        }
        if (!(error instanceof Unavailable || error instanceof RateLimited)) {
          throw error;
        }
        const wait = error.retryAfter !== null ? error.retryAfter * 1000 : backoff;
        this.logger.warn(`${error.message}; trying again in ${Math.round(wait)} ms`);
        await sleep(wait, this.stopper.signal);
        backoff = Math.min(backoff * 2, 10_000);
      }
    }
    return undefined;
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      if (this.running.size >= this.concurrency) {
        await Promise.race([...this.running, this.stopped]);
        continue;
      }
      const waitMs = Math.min(this.options.waitMs ?? 5_000, this.maxWaitMs);
      const asked = Date.now();
      const jobs = await this.retrying(() =>
        this.client.claim(
          {
            queues: this.options.queues,
            jobTypes: Object.keys(this.handlers),
            limit: this.concurrency - this.running.size,
            waitMs,
            worker: this.name,
            leaseMs: this.leaseMs,
          },
          // Not aborted by stop(): the server's claim would go on waiting, and the
          // jobs it then leased would be held by no one until their lease expired.
          // A stop waits for the claim (at most waitMs) and runs the jobs it brings.
        ),
      );
      if (jobs !== undefined && jobs.length === 0 && waitMs > 0 && Date.now() - asked < waitMs / 2) {
        // No jobs long before the wait ended: a WSGI server at its cap of waiting
        // claims answered at once (Retry-After: the wait asked for); claim again
        // after that wait, as if it had been waited.
        await sleep(Math.max(1_000, waitMs), this.stopper.signal);
        continue;
      }
      for (const job of jobs ?? []) {
        this.stats.claimed += 1;
        const task: Promise<void> = this.execute(job).finally(() => this.running.delete(task));
        this.running.add(task);
      }
    }
  }

  /** Run one claimed job and report it; never rejects. */
  private async execute(job: ClaimedJob): Promise<void> {
    const ctx = new Context(job);
    let lost = false;
    const send = (progress: Progress | undefined) => {
      this.client.heartbeat(job.jid, job.lease_token, this.leaseMs, progress).then(
        (answer) => {
          if (answer.cancel_requested && !ctx.cancelRequested) {
            ctx.cancelRequested = true;
            ctx.controller.abort(new Error("cancel requested"));
          }
        },
        (error: unknown) => {
          if (error instanceof LeaseLost) {
            lost = true;
            ctx.controller.abort(error);
          } else {
            this.logger.warn(`heartbeat of ${job.jid} failed: ${(error as Error).message}`);
            if (progress && ctx.pendingProgress === null) {
              ctx.pendingProgress = progress; // sent with the next beat
              ctx.progressSentAt = -Infinity;
            }
          }
        },
      );
    };
    const beat = setInterval(() => send(ctx.takeProgress(Date.now())), this.heartbeatMs);
    // Between two beats, each second, a waiting progress report goes with a beat of its own.
    const progressBeat = setInterval(() => {
      const report = ctx.takeProgress(Date.now());
      if (report) send(report);
    }, PROGRESS_INTERVAL_MS);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = new Error(`timed out after ${job.timeout_ms} ms`);
        error.name = "TimeoutError";
        ctx.controller.abort(error);
        reject(error);
      }, job.timeout_ms);
    });
    let outcome: { ok: true; result: unknown } | { ok: false; error: unknown };
    try {
      const handler = this.handlers[job.job_type];
      if (handler === undefined) {
        throw new Error(`no handler for job type ${job.job_type}`);
      }
      const result = await Promise.race([Promise.resolve().then(() => handler(job.payload, ctx)), timedOut]);
      outcome = { ok: true, result };
    } catch (error) {
      outcome = { ok: false, error };
    } finally {
      clearInterval(beat);
      clearInterval(progressBeat);
      clearTimeout(timer);
    }
    if (lost) {
      this.dropped(job);
      return;
    }
    try {
      if (outcome.ok) {
        await this.report(() => this.client.complete(job.jid, job.lease_token, outcome.result ?? null));
        this.stats.done += 1;
      } else {
        const { message, name } = errorText(outcome.error);
        const cancelled = ctx.cancelRequested;
        const retry = (outcome.error as { retry?: unknown } | null)?.retry !== false;
        const answer = await this.report(() =>
          this.client.fail(job.jid, job.lease_token, { error: message, exceptionClass: name, retry, cancelled }),
        );
        if (cancelled) {
          this.stats.cancelled += 1;
        } else {
          this.stats.failed += 1;
        }
        this.logger.warn(`job ${job.jid} (${job.job_type}) failed: ${name}; stored ${answer?.status}`);
      }
    } catch (error) {
      if (error instanceof LeaseLost) {
        this.dropped(job);
      } else {
        this.logger.error(`report of ${job.jid} failed: ${(error as Error).message}`);
      }
    }
  }

  /** A report, retried while the gateway is unreachable (its lease bounds this). */
  private async report<T>(fn: () => Promise<T>): Promise<T> {
    let backoff = 250;
    for (let tries = 1; ; tries++) {
      try {
        return await fn();
      } catch (error) {
        if (!(error instanceof Unavailable || error instanceof RateLimited) || tries >= 8) {
          throw error;
        }
        await sleep(error.retryAfter !== null ? error.retryAfter * 1000 : backoff);
        backoff = Math.min(backoff * 2, 5_000);
      }
    }
  }

  private dropped(job: ClaimedJob): void {
    this.stats.leaseLost += 1;
    this.logger.warn(`job ${job.jid} (${job.job_type}): lease lost, outcome dropped`);
  }
}
