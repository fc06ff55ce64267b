# frozen_string_literal: true

module JobQueue
  # Any refusal of the gateway, or a failure to reach it (status 0). Every non-2xx
  # answer is raised as the subclass of its status and code (docs/gateway.md,
  # "Errors"), so callers rescue what they mean:
  #
  #   begin
  #     client.enqueue("emails.send", {to: "a@example.com"}, id: "welcome/42")
  #   rescue JobQueue::DuplicateJob => e
  #     e.jid  # the holder
  #   end
  class Error < StandardError
    # The HTTP status (Integer); 0 when no answer came (connection refused, timeout).
    attr_reader :status
    # The gateway's `error` code (String), e.g. "invalid_request", "lease_lost".
    attr_reader :code
    # The gateway's explanation (String).
    attr_reader :detail
    # The field the error is about ("jobs[3].priority" in a batch), or nil.
    attr_reader :field
    # The whole JSON body (Hash with String keys: index, reason, jid, scope when present).
    attr_reader :body
    # Seconds to wait before trying again (the Retry-After header, Float), or nil.
    attr_reader :retry_after

    def initialize(status, body, retry_after = nil)
      @status = status
      @body = body
      @code = body.fetch("error", "error").to_s
      @detail = body.fetch("detail", "").to_s
      @field = body["field"]
      @retry_after = retry_after
      text = "#{status} #{@code}: #{@detail}"
      text += " (field #{@field})" if @field
      super(text)
    end

    # A batch's refused job, by position (Integer), or nil.
    def index = body["index"].is_a?(Integer) ? body["index"] : nil
    # The package's own code of an invalid_request (String), or nil.
    def reason = body["reason"]
    # A duplicate id's holder (String), or nil.
    def jid = body["jid"]
    # The scope a 403 lacked (String), or nil.
    def scope = body["scope"]

    # The typed error for an answer's status (Integer), JSON body (Hash) and
    # Retry-After header (String or nil).
    def self.for(status, body, retry_after = nil)
      wait = parse_retry_after(retry_after)
      klass = case status
              when 400 then BadRequest
              when 401 then Unauthorized
              when 402 then ProRequired
              when 403 then Forbidden
              when 404 then NotFound
              when 405 then MethodNotAllowed
              when 409 then body["error"] == "lease_lost" ? LeaseLost : DuplicateJob
              when 413 then BodyTooLarge
              when 415 then NotJson
              when 422 then InvalidRequest
              when 429 then RateLimited
              when 0 then Unreachable
              when 503
                { "lock_timeout" => LockTimeout, "database_unavailable" => DatabaseUnavailable }
                  .fetch(body["error"], ServiceUnavailable)
              when 502, 504 then ServiceUnavailable
              else Error
              end
      klass.new(status, body, wait)
    end

    # Seconds (Float) from a Retry-After value (seconds or an HTTP date), or nil.
    def self.parse_retry_after(value)
      return nil if value.nil? || value.strip.empty?
      return [Float(value), 0.0].max if value.strip.match?(/\A\d+(\.\d+)?\z/)

      require "time"
      [Time.httpdate(value) - Time.now, 0.0].max
    rescue ArgumentError
      nil
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
