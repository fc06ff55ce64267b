/**
 * Batches and workflows over the gateway (the server's docs/gateway.md "Batches and
 * workflows", docs/workflows.md): the shapes of `enqueueWorkflow`, `getBatch` and
 * `getWorkflow`, which {@link Client} exposes.
 */

import type { Duration } from "./client.js";

/** What a dependent does when an upstream job dies or is cancelled. */
export type UpstreamPolicy = "cancel" | "skip" | "ignore";

/** The enqueue options a workflow's step takes (no id, no unique key). */
export interface StepOptions {
  queue?: string;
  priority?: number;
  delay?: Duration;
  runAt?: Date | string;
  expiresMs?: number;
  timeoutMs?: number;
  maxRetry?: number;
}

/** One step of a workflow: a job, and the names of the steps it waits for. */
export interface WorkflowStep extends StepOptions {
  /** Unique in the workflow: the key of the answer's `jids` and of `ctx.upstream`. */
  name: string;
  jobType: string;
  payload?: unknown;
  /** Names of steps of this workflow it runs after (any order; no cycle). */
  after?: string[];
  /** This step's edges' policy; default the workflow's. */
  onUpstreamFailure?: UpstreamPolicy;
}

/** A batch's callback: a job made once when the batch reaches it. */
export interface BatchCallbackSpec {
  jobType: string;
  /** Handed to the callback as `payload.payload` (beside `batch` and `counts`). */
  payload?: unknown;
  /** Its enqueue options; no `runAt` (it runs when the batch ends). */
  options?: Omit<StepOptions, "runAt">;
}

/** `openBatch`'s callbacks and their default queue. */
export interface BatchOptions {
  onFinish?: BatchCallbackSpec;
  onSuccess?: BatchCallbackSpec;
  onFailure?: BatchCallbackSpec;
  /** The callbacks' queue when a callback names none. */
  queue?: string;
}

/** An enqueued workflow: its id, and each step's jid. */
export interface WorkflowResult {
  id: number;
  name: string;
  jids: Record<string, string>;
}

/** The counts of a batch or a workflow, read now. */
export interface Counts {
  total: number;
  done: number;
  failed: number;
  cancelled: number;
  pending: number;
  created_at: string;
  /** Null until every job ended. */
  finished_at: string | null;
}

/** A batch's callback: its job type, and its job's jid once made (`""` until then). */
export interface BatchCallback {
  job_type: string;
  jid: string;
}

/** `GET /sdk/batches/{id}`. */
export interface BatchState extends Counts {
  id: number;
  sealed: boolean;
  on_finish: BatchCallback | null;
  on_success: BatchCallback | null;
  on_failure: BatchCallback | null;
}

/** A step as `getWorkflow` reads it: `state` is `blocked` while it waits. */
export interface StepState {
  name: string;
  jid: string;
  job_type: string;
  queue: string;
  status: string;
  state: string;
  after: string[];
}

/** `GET /sdk/workflows/{id}`. */
export interface WorkflowState extends Counts {
  id: number;
  name: string;
  on_upstream_failure: UpstreamPolicy;
  /** The first 2,000 steps, in creation order. */
  steps: StepState[];
  /** True when the workflow has more steps than `steps` lists. */
  steps_truncated: boolean;
}

function isoTime(value: Date | string | undefined): string | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

function compact(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
}

/** The JSON body of `POST /sdk/workflows`. */
export function workflowBody(
  name: string,
  steps: WorkflowStep[],
  onUpstreamFailure?: UpstreamPolicy,
): Record<string, unknown> {
  return compact({
    name,
    on_upstream_failure: onUpstreamFailure,
    steps: steps.map((step) => {
      const options = compact({
        queue: step.queue,
        priority: step.priority,
        delay: step.delay,
        run_at: isoTime(step.runAt),
        expires_ms: step.expiresMs,
        timeout_ms: step.timeoutMs,
        max_retry: step.maxRetry,
      });
      return compact({
        name: step.name,
        job_type: step.jobType,
        payload: step.payload,
        options: Object.keys(options).length ? options : undefined,
        after: step.after,
        on_upstream_failure: step.onUpstreamFailure,
      });
    }),
  });
}

function callbackBody(spec: BatchCallbackSpec | undefined): Record<string, unknown> | undefined {
  if (spec === undefined) return undefined;
  const options = compact({
    queue: spec.options?.queue,
    priority: spec.options?.priority,
    delay: spec.options?.delay,
    expires_ms: spec.options?.expiresMs,
    timeout_ms: spec.options?.timeoutMs,
    max_retry: spec.options?.maxRetry,
  });
  return compact({
    job_type: spec.jobType,
    payload: spec.payload,
    options: Object.keys(options).length ? options : undefined,
  });
}

/** The JSON body of `POST /sdk/batches`. */
export function batchBody(options: BatchOptions): Record<string, unknown> {
  return compact({
    on_finish: callbackBody(options.onFinish),
    on_success: callbackBody(options.onSuccess),
    on_failure: callbackBody(options.onFailure),
    queue: options.queue,
  });
}

/** A batch's or workflow's id as a path segment; a TypeError for anything else. */
export function idSegment(what: string, id: number): string {
  if (!Number.isSafeInteger(id) || id < 1) {
    throw new TypeError(`${what} must be an integer >= 1: got ${String(id)}`);
  }
  return String(id);
}
