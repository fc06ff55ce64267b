require "json"
require "http/headers"

module JobQueue
  # Any refusal of the gateway, or a failure to reach it (status 0). Every non-2xx
  # answer is raised as the subclass of its status and code (docs/gateway.md,
  # "Errors"), so callers rescue what they mean:
  #
  # ```
  # begin
  #   jq.enqueue("emails.send", {to: "a@example.com"}, id: "welcome/42")
  # rescue e : JobQueue::DuplicateJob
  #   e.jid # the holder
  # end
  # ```
  class Error < Exception
    # The HTTP status; 0 when no answer came (connection refused, timeout).
    getter status : Int32
    # The gateway's `error` code, e.g. "invalid_request", "lease_lost".
    getter code : String
    # The gateway's explanation.
    getter detail : String
    # The field the error is about ("jobs[3].priority" in a batch), or nil.
    getter field : String?
    # The whole JSON body (with index, reason, jid, scope when present).
    getter body : JSON::Any
    # Seconds to wait before trying again (the Retry-After header), or nil.
    getter retry_after : Float64?

    def initialize(@status : Int32, @body : JSON::Any, @retry_after : Float64? = nil)
      @code = body["error"]?.try(&.as_s?) || "error"
      @detail = body["detail"]?.try(&.as_s?) || ""
      @field = body["field"]?.try(&.as_s?)
      text = "#{status} #{@code}: #{@detail}"
      text += " (field #{@field})" if @field
      super(text)
    end

    # A batch's refused job, by position, or nil.
    def index : Int64?
      body["index"]?.try(&.as_i64?)
    end

    # The package's own code of an invalid_request, or nil.
    def reason : String?
      body["reason"]?.try(&.as_s?)
    end

    # A duplicate id's holder (409 duplicate_job), or nil.
    def jid : String?
      body["jid"]?.try(&.as_s?)
    end

    # The scope a 403 lacked, or nil.
    def scope : String?
      body["scope"]?.try(&.as_s?)
    end

    # The typed error for an answer's status, JSON body and Retry-After header.
    def self.for(status : Int32, body : JSON::Any, retry_after : String? = nil) : Error
      wait = parse_retry_after(retry_after)
      code = body["error"]?.try(&.as_s?)
      case status
      when 400 then BadRequest.new(status, body, wait)
      when 401 then Unauthorized.new(status, body, wait)
      when 402 then ProRequired.new(status, body, wait)
      when 403 then Forbidden.new(status, body, wait)
      when 404 then NotFound.new(status, body, wait)
      when 405 then MethodNotAllowed.new(status, body, wait)
      when 409 then code == "lease_lost" ? LeaseLost.new(status, body, wait) : DuplicateJob.new(status, body, wait)
      when 413 then BodyTooLarge.new(status, body, wait)
      when 415 then NotJson.new(status, body, wait)
      when 422 then InvalidRequest.new(status, body, wait)
      when 429 then RateLimited.new(status, body, wait)
      when 0   then Unreachable.new(status, body, wait)
      when 503
        case code
        when "lock_timeout"         then LockTimeout.new(status, body, wait)
        when "database_unavailable" then DatabaseUnavailable.new(status, body, wait)
        else                             ServiceUnavailable.new(status, body, wait)
        end
      when 502, 504 then ServiceUnavailable.new(status, body, wait)
      else               Error.new(status, body, wait)
      end
    end

    # An error of no answer: "timeout" or "connection_failed", with its detail.
    def self.unreachable(code : String, detail : String) : Error
      self.for(0, JSON::Any.new({"error" => JSON::Any.new(code), "detail" => JSON::Any.new(detail)}))
    end

    # Seconds from a Retry-After value (seconds or an HTTP date), or nil.
    def self.parse_retry_after(value : String?) : Float64?
      return nil if value.nil? || value.strip.empty?
      if seconds = value.strip.to_f?
        return {seconds, 0.0}.max
      end
      at = HTTP.parse_time(value)
      at ? {(at - Time.utc).total_seconds, 0.0}.max : nil
    end
  end

  # 400 bad_request: a path or query parameter is malformed; `field` names it.
  class BadRequest < Error; end

  # 422 invalid_request: a body field is invalid; `field` names it, `reason` says why.
  class InvalidRequest < Error; end

  # 401 unauthorized: no token, or an unknown, revoked or expired one.
  class Unauthorized < Error; end

  # 402 pro_required: a Pro unique mode or route without a valid licence.
  class ProRequired < Error; end

  # 403 forbidden: the token lacks the scope (`scope`) or is not allowed the queue.
  class Forbidden < Error; end

  # 404 not_found: no such job, a free id, or no such route.
  class NotFound < Error; end

  # 405 method_not_allowed: the route exists, not with this method.
  class MethodNotAllowed < Error; end

  # 409 duplicate_job: the id is held by job `jid`.
  class DuplicateJob < Error; end

  # 409 lease_lost: a report on a job no longer held under that lease token; drop the outcome.
  class LeaseLost < Error; end

  # 413 body_too_large: the request body is over the gateway's MAX_BODY_BYTES.
  class BodyTooLarge < Error; end

  # 415 not_json: the body was not JSON (never sent by this client).
  class NotJson < Error; end

  # 429 rate_limited: the token is over its request rate; `retry_after` says when to try again.
  class RateLimited < Error; end

  # 503 (or 502, 504): the gateway cannot serve now; `retry_after` says when to try again.
  class ServiceUnavailable < Error; end

  # 503 lock_timeout: a creation lock timed out.
  class LockTimeout < ServiceUnavailable; end

  # 503 database_unavailable: the database did not answer.
  class DatabaseUnavailable < ServiceUnavailable; end

  # Status 0: the gateway could not be reached (connection_failed) or did not answer in time (timeout).
  class Unreachable < ServiceUnavailable; end
end
