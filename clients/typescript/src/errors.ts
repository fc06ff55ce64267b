/**
 * Typed errors of the gateway: every non-2xx answer is a {@link GatewayError}
 * built from its JSON body `{"error": code, "detail", "field", ...}`, as a subclass
 * chosen by status and code (docs/gateway.md, "Errors").
 */

/** The JSON body of a gateway error. */
export interface ErrorBody {
  error: string;
  detail: string;
  field?: string | null;
  /** The refused job's position in a batch. */
  index?: number | null;
  /** The package's own code of an `invalid_request`. */
  reason?: string | null;
  /** A duplicate id's holder (409 `duplicate_job`). */
  jid?: string | null;
  /** The scope a 403 lacked. */
  scope?: string | null;
  [key: string]: unknown;
}

/** Any refusal of the gateway, or a failure to reach it (status 0). */
export class GatewayError extends Error {
  /** The HTTP status; 0 when no answer came (connection refused, timeout). */
  readonly status: number;
  /** The gateway's `error` code, e.g. `invalid_request`, `lease_lost`. */
  readonly code: string;
  /** The gateway's human-readable explanation. */
  readonly detail: string;
  /** The field the error is about (`jobs[3].priority` in a batch), or null. */
  readonly field: string | null;
  /** The whole JSON body (with `index`, `reason`, `jid`, `scope` when present). */
  readonly body: ErrorBody;

  constructor(status: number, body: ErrorBody) {
    super(`${status} ${body.error}: ${body.detail}${body.field ? ` (field ${body.field})` : ""}`);
    this.name = new.target.name;
    this.status = status;
    this.code = body.error;
    this.detail = body.detail;
    this.field = body.field ?? null;
    this.body = body;
  }

  /** A batch's refused job, by position; null otherwise. */
  get index(): number | null {
    return typeof this.body.index === "number" ? this.body.index : null;
  }
}

/** 400 `bad_request` or 422 `invalid_request`: `field` names what is wrong. */
export class InvalidRequest extends GatewayError {}

/** 400 `bad_request`: a path or query parameter is malformed (`field` names it). */
export class BadRequest extends GatewayError {}

/** 405 `method_not_allowed`: the route exists, not with this method. */
export class MethodNotAllowed extends GatewayError {}

/** 415 `not_json`: the body was not sent as JSON. */
export class NotJson extends GatewayError {}

/** 401: no token, or an unknown, revoked or expired one. */
export class Unauthorized extends GatewayError {}

/** 402 `pro_required`: a Pro unique mode or route without a valid licence. */
export class ProRequired extends GatewayError {}

/** 403: the token lacks the scope (`body.scope`) or is not allowed the queue. */
export class Forbidden extends GatewayError {}

/** 404 `not_found`: no such job, a free id, or no such route. */
export class NotFound extends GatewayError {}

/** 409 `duplicate_job`: the id is held by job `jid`. */
export class DuplicateJob extends GatewayError {
  /** The holder's jid. */
  get jid(): string | null {
    return typeof this.body.jid === "string" ? this.body.jid : null;
  }
}

/** 409 `lease_lost`: a report on a job no longer held under that lease token. */
export class LeaseLost extends GatewayError {}

/** 413 `body_too_large`: the request body is over the gateway's limit. */
export class BodyTooLarge extends GatewayError {}

/** An answer that says when to try again (`Retry-After`, seconds). */
abstract class RetryableError extends GatewayError {
  /** Seconds to wait before trying again (the `Retry-After` header), or null. */
  readonly retryAfter: number | null;

  constructor(status: number, body: ErrorBody, retryAfter: number | null) {
    super(status, body);
    this.retryAfter = retryAfter;
  }
}

/** 429 `rate_limited`: the token is over its request rate. */
export class RateLimited extends RetryableError {}

/**
 * 503 `lock_timeout` or `database_unavailable`, or status 0: the gateway could
 * not be reached (`connection_failed`) or did not answer in time (`timeout`).
 */
export class Unavailable extends RetryableError {}

/** 503 of a code other than the two below. */
export class ServiceUnavailable extends Unavailable {}

/** 503 `lock_timeout`: a creation lock timed out; try again. */
export class LockTimeout extends ServiceUnavailable {}

/** 503 `database_unavailable`: the gateway's database did not answer; try again. */
export class DatabaseUnavailable extends ServiceUnavailable {}

/** Parse a `Retry-After` header (seconds, or an HTTP date) into seconds. */
export function parseRetryAfter(value: string | null): number | null {
  if (value === null || value.trim() === "") {
    return null;
  }
  const seconds = Number(value);
  if (Number.isFinite(seconds)) {
    return Math.max(0, seconds);
  }
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

/**
 * The typed error for an answer's status and body.
 *
 * @param status the HTTP status (0: no answer)
 * @param body the parsed JSON body; a missing or non-JSON body gets a generic one
 * @param retryAfter the `Retry-After` header's value, if any
 */
export function errorFor(status: number, body: ErrorBody, retryAfter: string | null = null): GatewayError {
  const wait = parseRetryAfter(retryAfter);
  switch (status) {
    case 400:
      return new BadRequest(status, body);
    case 405:
      return new MethodNotAllowed(status, body);
    case 415:
      return new NotJson(status, body);
    case 422:
      return new InvalidRequest(status, body);
    case 401:
      return new Unauthorized(status, body);
    case 402:
      return new ProRequired(status, body);
    case 403:
      return new Forbidden(status, body);
    case 404:
      return new NotFound(status, body);
    case 409:
      return body.error === "lease_lost" ? new LeaseLost(status, body) : new DuplicateJob(status, body);
    case 413:
      return new BodyTooLarge(status, body);
    case 429:
      return new RateLimited(status, body, wait);
    case 503:
      if (body.error === "lock_timeout") {
        return new LockTimeout(status, body, wait);
      }
      if (body.error === "database_unavailable") {
        return new DatabaseUnavailable(status, body, wait);
      }
      return new ServiceUnavailable(status, body, wait);
    case 0:
    case 502:
    case 504:
      return new Unavailable(status, body, wait);
    default:
      return new GatewayError(status, body);
  }
}
