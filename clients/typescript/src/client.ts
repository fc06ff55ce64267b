/**
 * The producer side of the gateway (docs/gateway.md, "Routes"): enqueue, batches,
 * the id verbs (docs/design.md#ids), a job by jid, cancel and retry; plus the worker protocol's
 * raw calls, which {@link Worker} drives.
 *
 * Options go in camelCase (`maxRetry`); answers are the gateway's JSON as
 * documented, in snake_case (`job.max_retry`).
 */

import { errorFor, type ErrorBody, GatewayError, NotFound } from "./errors.js";
import {
  batchBody,
  type BatchOptions,
  type BatchState,
  idSegment,
  type UpstreamPolicy,
  workflowBody,
  type WorkflowResult,
  type WorkflowState,
  type WorkflowStep,
} from "./workflows.js";

/** Where the gateway is and how to authenticate. */
export interface ClientOptions {
  /** The site's root (`http://127.0.0.1:8000`) or the gateway's (`.../sdk`). */
  url: string;
  /** A bearer token, `jqt_...` (`manage.py jobqueue token create`). */
  token: string;
  /** Per-request timeout in ms, beyond a claim's own wait (default 30000). */
  timeoutMs?: number;
  /** A fetch implementation (default: Node's global fetch). */
  fetch?: typeof fetch;
}

/** A duration: `"500ms"`, `"5s"`, `"1m"`, or a number of seconds. */
export type Duration = string | number;

/** The options of one job, as `enqueue_job` takes them. */
export interface EnqueueOptions {
  /** The queue (default: the job type's, else `default`). */
  queue?: string;
  /** 1 runs first. */
  priority?: number;
  /** Run no sooner than this from now. Not with `runAt`. */
  delay?: Duration;
  /** Run no sooner than this time (a Date or ISO 8601 with an offset). */
  runAt?: Date | string;
  expiresMs?: number;
  timeoutMs?: number;
  maxRetry?: number;
  uniqueKey?: string;
  uniqueMode?: "while_locked" | "until_executing" | "until_executed";
  uniqueTtlMs?: number;
  /** An id the job holds (docs/design.md#ids); a held id is a {@link DuplicateJob}. */
  id?: string;
  /** An existing batch's id: the job joins it. `enqueue` only (not `enqueueBatch`). */
  batch?: number;
  /** Jids of jobs this one waits for (state `blocked` until they are done). `enqueue` only. */
  after?: string[];
  /** With `after`: what an upstream job's death does to this one (default `cancel`). */
  onUpstreamFailure?: UpstreamPolicy;
  /** The key a partitioned limit counts the job under (docs/limits.md). */
  limitKey?: string;
}

/** One job of a batch. */
export interface JobSpec extends EnqueueOptions {
  jobType: string;
  payload?: unknown;
}

/** `enqueued` with the new jid, or `deduplicated` with the holder's. */
export interface EnqueueResult {
  status: "enqueued" | "deduplicated";
  jid: string;
}

/** A failed attempt, as `JobOut.last_error` shows it. */
export interface ErrorEntry {
  attempt: number | null;
  message: string;
  exception_class: string;
  at: string | null;
}

/** The state words of docs/design.md#states. */
export type JobState = "scheduled" | "waiting" | "blocked" | "running" | "failed" | "done" | "cancelled";

/** A job by jid (`GET /sdk/jobs/{jid}`); payload and result null for a secure type. */
export interface Job {
  jid: string;
  queue: string;
  job_type: string;
  id: string | null;
  status: string;
  state: JobState;
  attempt: number;
  max_retry: number;
  priority: number;
  secure: boolean;
  payload: unknown;
  result: unknown;
  last_error: ErrorEntry | null;
  cancel_requested: boolean;
  run_at: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  expires_at: string | null;
}

/** A job, as the id verbs `get` and `list` show it. */
export interface IdJob {
  id: string | null;
  value: unknown;
  state: string;
  at: string;
  attempt: number;
  jid: string;
  queue: string;
  job_type: string;
  priority: number;
  max_retry: number;
  result: unknown;
  message: string;
  cancel_requested: boolean;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
}

/** A page of `list`; `next` is the following page's cursor, or null. */
export interface Page {
  jobs: IdJob[];
  next: string | null;
}

/** The value and time of an id verb (`add`, `set`, `update`). */
export interface IdValue {
  value?: unknown;
  /** Default: the queue's one job type. */
  jobType?: string;
  /** Not with `delay`. */
  at?: Date | string;
  delay?: Duration;
}

/** `list`'s filters. */
export interface ListOptions {
  prefix?: string;
  state?: JobState;
  limit?: number;
  cursor?: string;
}

/** What a registered worker should use (ms). */
export interface Registration {
  name: string;
  lease_ms: number;
  heartbeat_ms: number;
  max_wait_ms: number;
}

/** How far a running job got: `done` of `total` units (0: unknown), and a short message. */
export interface Progress {
  done: number;
  total: number;
  message?: string | null;
}

/** A bulk action's answer: jobs changed, and its counts by kind. */
export interface BulkResult {
  action: string;
  changed: number;
  detail: Record<string, number>;
}

/** What a worker registers (docs/gateway.md, "The worker protocol"). */
export interface RegisterOptions {
  name: string;
  host?: string;
  pid?: number;
  languages?: string[];
  queues: string[];
  jobTypes?: string[];
  concurrency?: number;
  version?: string;
}

/** A claim's request. */
export interface ClaimOptions {
  queues: string[];
  /** Empty: any type. */
  jobTypes?: string[];
  /** 1..100 (default 1). */
  limit?: number;
  /** How long to wait for a job, 0..30000 ms (default 0). */
  waitMs?: number;
  /** The registered worker's name. */
  worker?: string;
  /** The lease, ms (default: the site's `LEASE_MS`). */
  leaseMs?: number;
}

/** A claimed job: report on it with its `lease_token`. */
export interface ClaimedJob {
  jid: string;
  queue: string;
  job_type: string;
  id: string | null;
  payload: unknown;
  attempt: number;
  max_retry: number;
  priority: number;
  timeout_ms: number;
  lease_token: string;
  lease_expires_at: string | null;
  cancel_requested: boolean;
}

/** A failed attempt's report. */
export interface FailOptions {
  error?: string;
  /** The error's class name (e.g. `TypeError`), stored as the attempt's `exception_class`. */
  exceptionClass?: string;
  /** false: dead-letter at once (default true). */
  retry?: boolean;
  /** true: the handler stopped on a cancel request. */
  cancelled?: boolean;
}

/** Path parameters, percent-encoded; an id keeps its `/` separators. */
function segment(text: string): string {
  return encodeURIComponent(text);
}

function idPath(id: string): string {
  return id.split("/").map(segment).join("/");
}

function isoTime(value: Date | string | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

/** Drop undefined members, so the gateway applies its defaults. */
function compact(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
}

function jobBody(jobType: string, payload: unknown, options: EnqueueOptions): Record<string, unknown> {
  return compact({
    job_type: jobType,
    payload,
    queue: options.queue,
    priority: options.priority,
    delay: options.delay,
    run_at: isoTime(options.runAt),
    expires_ms: options.expiresMs,
    timeout_ms: options.timeoutMs,
    max_retry: options.maxRetry,
    unique_key: options.uniqueKey,
    unique_mode: options.uniqueMode,
    unique_ttl_ms: options.uniqueTtlMs,
    id: options.id,
    batch: options.batch,
    after: options.after,
    on_upstream_failure: options.onUpstreamFailure,
    limit_key: options.limitKey,
  });
}

function idValueBody(value: IdValue): Record<string, unknown> {
  return compact({ value: value.value, job_type: value.jobType, at: isoTime(value.at), delay: value.delay });
}

/** The id verbs (docs/design.md#ids) on one client: `client.ids.add(queue, id, {value})`. */
export class IdVerbs {
  constructor(private readonly client: Client) {}

  /** Add a job holding `id` unless one holds it: `{added: false}` then (no error). */
  async add(queue: string, id: string, value: IdValue = {}): Promise<{ added: boolean }> {
    return this.client.request("POST", `/queues/${segment(queue)}/ids/${idPath(id)}/add`, idValueBody(value));
  }

  /** Make the job holding `id` have this value and time, creating it if need be. */
  async set(queue: string, id: string, value: IdValue = {}): Promise<{ set: boolean }> {
    return this.client.request("POST", `/queues/${segment(queue)}/ids/${idPath(id)}/set`, idValueBody(value));
  }

  /** Change the scheduled or waiting job holding `id`; `{updated: false}` if none. */
  async update(queue: string, id: string, value: IdValue = {}): Promise<{ updated: boolean }> {
    return this.client.request("POST", `/queues/${segment(queue)}/ids/${idPath(id)}/update`, idValueBody(value));
  }

  /** Remove the waiting job holding `id`, or ask a running one to stop. */
  async cancel(queue: string, id: string): Promise<{ cancelled: boolean }> {
    return this.client.request("POST", `/queues/${segment(queue)}/ids/${idPath(id)}/cancel`, {});
  }

  /** The job holding `id`, or null when the id is free. */
  async get(queue: string, id: string): Promise<IdJob | null> {
    try {
      return await this.client.request<IdJob>("GET", `/queues/${segment(queue)}/ids/${idPath(id)}`);
    } catch (error) {
      if (error instanceof NotFound) {
        return null;
      }
      throw error;
    }
  }

  /** One page of the queue's jobs (by id prefix, state); pass `next` as `cursor`. */
  async list(queue: string, options: ListOptions = {}): Promise<Page> {
    const query = compact({ ...options });
    return this.client.request("GET", `/queues/${segment(queue)}/jobs`, undefined, query);
  }
}

/**
 * A gateway client. Every call returns the documented answer or rejects with a
 * {@link GatewayError} subclass (status 0 {@link Unavailable} when no answer came).
 */
export class Client {
  /** The gateway's root, ending in `/sdk`. */
  readonly baseUrl: string;
  /** The id verbs (docs/design.md#ids). */
  readonly ids: IdVerbs;
  private readonly token: string;
  private readonly timeoutMs: number;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions) {
    if (!options.url) {
      throw new TypeError("Client: url is required (the site's root, e.g. http://127.0.0.1:8000)");
    }
    if (!options.token) {
      throw new TypeError("Client: token is required (manage.py jobqueue token create)");
    }
    const root = options.url.replace(/\/+$/, "");
    this.baseUrl = root.endsWith("/sdk") ? root : `${root}/sdk`;
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.ids = new IdVerbs(this);
  }

  /**
   * One request to the gateway.
   *
   * @param method HTTP method
   * @param path below `/sdk`, starting with `/`, already percent-encoded
   * @param body JSON-serialisable body, or undefined for none
   * @param query query parameters (undefined members are left out)
   * @param extra `timeoutMs` added to the client's timeout; `signal` to abort
   * @returns the parsed JSON answer
   * @throws GatewayError (a subclass per status) on any non-2xx answer or none
   */
  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    query?: Record<string, unknown>,
    extra: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<T> {
    let url = this.baseUrl + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [key, value] of Object.entries(query)) {
        if (value !== undefined && value !== null) {
          params.set(key, String(value));
        }
      }
      const text = params.toString();
      if (text) {
        url += `?${text}`;
      }
    }
    const timeout = AbortSignal.timeout(this.timeoutMs + (extra.timeoutMs ?? 0));
    const signal = extra.signal ? AbortSignal.any([timeout, extra.signal]) : timeout;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.token}`,
      Accept: "application/json",
    };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
    }
    let response: Response;
    let text: string;
    try {
      response = await this.fetchImpl(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
      text = await response.text();
    } catch (error) {
      if (extra.signal?.aborted) {
        throw error;
      }
      const timedOut = timeout.aborted;
      throw errorFor(0, {
        error: timedOut ? "timeout" : "connection_failed",
        detail: timedOut
          ? `no answer from ${url} within ${this.timeoutMs + (extra.timeoutMs ?? 0)} ms`
          : `cannot reach ${url}: ${describe(error)}`,
      });
    }
    let parsed: unknown = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = null;
      }
    }
    if (!response.ok) {
      const errorBody: ErrorBody =
        parsed && typeof parsed === "object" && typeof (parsed as ErrorBody).error === "string"
          ? (parsed as ErrorBody)
          : { error: `http_${response.status}`, detail: text.slice(0, 500) || response.statusText };
      throw errorFor(response.status, errorBody, response.headers.get("Retry-After"));
    }
    if (parsed === null && text) {
      throw new GatewayError(response.status, { error: "not_json", detail: `the answer is not JSON: ${text.slice(0, 200)}` });
    }
    return parsed as T;
  }

  /** Enqueue one job: `enqueued` (201) or `deduplicated` by its unique key (200). */
  async enqueue(jobType: string, payload?: unknown, options: EnqueueOptions = {}): Promise<EnqueueResult> {
    return this.request("POST", "/jobs", jobBody(jobType, payload, options));
  }

  /**
   * Enqueue up to `MAX_BATCH` (1000) jobs, all or nothing: one refused job rejects
   * the batch (`error.index` names it) and nothing is stored.
   */
  async enqueueBatch(jobs: JobSpec[]): Promise<EnqueueResult[]> {
    const body = { jobs: jobs.map(({ jobType, payload, ...options }) => jobBody(jobType, payload, options)) };
    const answer = await this.request<{ results: EnqueueResult[] }>("POST", "/jobs/batch", body);
    return answer.results;
  }

  /**
   * Enqueue a workflow: named steps, each after the steps it names (any order, no
   * cycle), all or nothing. A bad step rejects with {@link InvalidRequest} whose
   * `field` names it (`steps[2].after` for a cycle through it). Needs `produce`.
   */
  async enqueueWorkflow(name: string, steps: WorkflowStep[], onUpstreamFailure?: UpstreamPolicy): Promise<WorkflowResult> {
    return this.request("POST", "/workflows", workflowBody(name, steps, onUpstreamFailure));
  }

  /**
   * Open a batch with callbacks: add jobs with `enqueue(..., {batch: id})`, then
   * {@link sealBatch}; it finishes, and makes its callbacks once each, only once
   * sealed and every job of it ended. Needs `produce` on the callbacks' queues.
   */
  async openBatch(options: BatchOptions = {}): Promise<BatchState> {
    return this.request("POST", "/batches", batchBody(options));
  }

  /** Seal a batch (again: nothing more); a batch whose jobs all ended finishes here. */
  async sealBatch(id: number): Promise<BatchState> {
    return this.request("POST", `/batches/${idSegment("a batch's id", id)}/seal`, {});
  }

  /** A batch's counts and callbacks, read now; {@link NotFound} when there is none. */
  async getBatch(id: number): Promise<BatchState> {
    return this.request("GET", `/batches/${idSegment("a batch's id", id)}`);
  }

  /** A workflow's counts and each step's state, read now; {@link NotFound} when there is none. */
  async getWorkflow(id: number): Promise<WorkflowState> {
    return this.request("GET", `/workflows/${idSegment("a workflow's id", id)}`);
  }

  /** The job `jid`; rejects with {@link NotFound} when there is none. */
  async getJob(jid: string): Promise<Job> {
    return this.request("GET", `/jobs/${segment(jid)}`);
  }

  /** Cancel a waiting job (`cancelled`), or ask a running one to stop (`cancel_requested`). */
  async cancel(jid: string): Promise<{ cancelled: boolean; cancel_requested: boolean }> {
    return this.request("POST", `/jobs/${segment(jid)}/cancel`, {});
  }

  /** Make a dead letter (or scheduled job) due now; needs the `admin` scope. */
  async retry(jid: string): Promise<{ retried: boolean }> {
    return this.request("POST", `/jobs/${segment(jid)}/retry`, {});
  }

  /**
   * Retry, cancel or delete every job `filter` selects (admin scope, Pro): the filter
   * language of the server's docs/console.md "Search syntax", e.g.
   * `"queue:mail state:failed payload.customer_id:42"`. A bad term is a 422
   * `invalid_request` naming it.
   */
  async bulk(action: "retry" | "cancel" | "delete", filter: string): Promise<BulkResult> {
    return this.request("POST", "/jobs/bulk", { action, filter });
  }

  // The worker protocol ----------------------------------------------------

  /** Mark a registered worker stopped (a clean exit): `stopped` false if it already was; 404 for an unknown name. */
  async stopWorker(name: string): Promise<{ name: string; stopped: boolean }> {
    return this.request("POST", "/worker/stop", { name });
  }

  /** Register (or refresh) a worker process; answers its lease and heartbeat, ms. */
  async register(options: RegisterOptions): Promise<Registration> {
    return this.request(
      "POST",
      "/worker/register",
      compact({
        name: options.name,
        host: options.host,
        pid: options.pid,
        languages: options.languages,
        queues: options.queues,
        job_types: options.jobTypes,
        concurrency: options.concurrency,
        version: options.version,
      }),
    );
  }

  /** Claim up to `limit` due jobs, waiting up to `waitMs` for one; `signal` aborts. */
  async claim(options: ClaimOptions, signal?: AbortSignal): Promise<ClaimedJob[]> {
    const answer = await this.request<{ jobs: ClaimedJob[] }>(
      "POST",
      "/worker/claim",
      compact({
        queues: options.queues,
        job_types: options.jobTypes,
        limit: options.limit,
        wait_ms: options.waitMs,
        worker: options.worker,
        lease_ms: options.leaseMs,
      }),
      undefined,
      { timeoutMs: options.waitMs ?? 0, signal },
    );
    return answer.jobs;
  }

  /** Extend a claimed job's lease; rejects with {@link LeaseLost} when it is not held. */
  async heartbeat(jid: string, leaseToken: string, leaseMs?: number, progress?: Progress): Promise<{ cancel_requested: boolean }> {
    return this.request(
      "POST",
      `/worker/jobs/${segment(jid)}/heartbeat`,
      compact({ lease_token: leaseToken, lease_ms: leaseMs, progress }),
    );
  }

  /** Report success with a JSON result; answers the stored status (`done`, or `init`). */
  async complete(jid: string, leaseToken: string, result?: unknown): Promise<{ status: string }> {
    return this.request("POST", `/worker/jobs/${segment(jid)}/complete`, { lease_token: leaseToken, result: result ?? null });
  }

  /** Report a failed attempt; answers the stored status (`retry`, `max_retry`, `error`, `cancelled`). */
  async fail(jid: string, leaseToken: string, options: FailOptions = {}): Promise<{ status: string }> {
    return this.request(
      "POST",
      `/worker/jobs/${segment(jid)}/fail`,
      compact({
        lease_token: leaseToken,
        error: options.error,
        exception_class: options.exceptionClass,
        retry: options.retry,
        cancelled: options.cancelled,
      }),
    );
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as Error & { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
