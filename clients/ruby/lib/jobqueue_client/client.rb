# frozen_string_literal: true

require "json"
require "net/http"
require "time"
require "uri"

require_relative "errors"

module JobQueue
  # A client of the HTTP SDK gateway (docs/gateway.md): the producer calls and the
  # worker protocol's calls. Answers are the gateway's JSON as Hashes with String
  # keys; every refusal raises the JobQueue::Error subclass of its code. Thread-safe:
  # each request opens its own connection.
  #
  #   jq = JobQueue::Client.new("http://127.0.0.1:8000", "jqt_...")
  #   jq.enqueue("emails.send", {to: "a@example.com"}, queue: "emails", delay: "5s")
  class Client
    # The options of an enqueue, in the gateway's JobIn names.
    ENQUEUE_OPTIONS = %i[queue priority delay run_at expires_ms timeout_ms max_retry
                         unique_key unique_mode unique_ttl_ms id limit_key batch after
                         on_upstream_failure].freeze

    # The gateway's root, ending in "/sdk" (String).
    attr_reader :base_url
    # The id verbs (JobQueue::IdVerbs).
    attr_reader :ids

    # url: the site's root ("http://127.0.0.1:8000") or the gateway's (".../sdk").
    # token: an API token ("jqt_...", manage.py jobqueue token create).
    # timeout: seconds a request may take (Float, default 30); a claim adds its wait_ms.
    # Raises ArgumentError on a missing url or token.
    def initialize(url, token, timeout: 30)
      raise ArgumentError, "url is required (the site's root, e.g. http://127.0.0.1:8000)" if url.to_s.empty?
      raise ArgumentError, "token is required (manage.py jobqueue token create)" if token.to_s.empty?

      root = url.to_s.sub(%r{/+\z}, "")
      @base_url = root.end_with?("/sdk") ? root : "#{root}/sdk"
      @token = token.to_s
      @timeout = Float(timeout)
      @ids = IdVerbs.new(self)
    end

    # Enqueue one job. payload: any JSON value. Options (keywords): queue, priority
    # (1 runs first), delay ("500ms", "5s", "1m" or seconds), run_at (Time or ISO 8601
    # with an offset), expires_ms, timeout_ms, max_retry, unique_key, unique_mode
    # ("while_locked", "until_executing", "until_executed"), unique_ttl_ms, id,
    # limit_key (the key a partitioned limit counts it under, docs/limits.md), and on
    # this call only (not in a batch) batch (an open batch's id), after (an Array of
    # jids it waits for, "blocked" until each is done) and on_upstream_failure
    # ("cancel", "skip", "ignore"), docs/workflows.md.
    # Returns {"status" => "enqueued"|"deduplicated", "jid" => String}.
    # Raises InvalidRequest (422), DuplicateJob (409, a held id), ProRequired (402), Forbidden (403).
    def enqueue(job_type, payload = nil, **options)
      request(:post, "/jobs", self.class.job_body(job_type, payload, options))
    end

    # Enqueue jobs all or nothing. jobs: Array of Hashes {job_type:, payload:, **options}.
    # Returns an Array of {"status", "jid"}, one per job in order.
    # Raises as #enqueue for the first refused job (its `index`); nothing is stored then.
    def enqueue_batch(jobs)
      bodies = jobs.map do |job|
        job = job.transform_keys(&:to_sym)
        self.class.job_body(job.delete(:job_type), job.delete(:payload), job)
      end
      request(:post, "/jobs/batch", { "jobs" => bodies }).fetch("results")
    end

    # The job (Hash, JobOut) with this jid. Raises NotFound when there is none.
    def get_job(jid)
      request(:get, "/jobs/#{segment(jid)}")
    end

    # Cancel a job: a waiting one at once, a running one by request (its worker sees
    # cancel_requested). Returns {"cancelled" => bool, "cancel_requested" => bool}.
    def cancel(jid)
      request(:post, "/jobs/#{segment(jid)}/cancel", {})
    end

    # Make a failed or cancelled job due again (admin scope). Returns true if it was.
    def retry(jid)
      request(:post, "/jobs/#{segment(jid)}/retry", {}).fetch("retried")
    end

    # Register a worker. name: nil to have one made; returns
    # {"name", "lease_ms", "heartbeat_ms", "max_wait_ms"}. Raises Forbidden for another token's name.
    def register(queues:, name: nil, host: nil, pid: nil, languages: nil, job_types: nil,
                 concurrency: nil, version: nil)
      request(:post, "/worker/register",
              compact("name" => name, "host" => host, "pid" => pid, "languages" => languages,
                      "queues" => queues, "job_types" => job_types, "concurrency" => concurrency,
                      "version" => version))
    end

    # Claim up to `limit` (1..100) due jobs, waiting up to wait_ms (0..30000 ms) for one.
    # Returns an Array of claimed jobs (Hashes with "jid", "payload", "lease_token", ...).
    def claim(queues:, job_types: nil, limit: nil, wait_ms: nil, worker: nil, lease_ms: nil)
      body = compact("queues" => queues, "job_types" => job_types, "limit" => limit,
                     "wait_ms" => wait_ms, "worker" => worker, "lease_ms" => lease_ms)
      request(:post, "/worker/claim", body, extra_timeout: (wait_ms || 0) / 1000.0).fetch("jobs")
    end

    # Extend a claimed job's lease (lease_ms: ms, default the site's LEASE_MS).
    # Returns true when a cancel was requested. Raises LeaseLost when the job is no longer held.
    def heartbeat(jid, lease_token, lease_ms: nil)
      request(:post, "/worker/jobs/#{segment(jid)}/heartbeat",
              compact("lease_token" => lease_token, "lease_ms" => lease_ms)).fetch("cancel_requested")
    end

    # Report a claimed job done with its result (any JSON value). Returns the stored
    # status ("done"; "init" when an id's set asked for one run more). Raises LeaseLost.
    def complete(jid, lease_token, result = nil)
      request(:post, "/worker/jobs/#{segment(jid)}/complete",
              { "lease_token" => lease_token, "result" => result }).fetch("status")
    end

    # Report a claimed job failed. error: the message; exception_class: the error's
    # class name; retry: false dead-letters it at once; cancelled: true after a
    # cancel request. Returns the stored status ("retry", "max_retry", "error",
    # "cancelled", ...). Raises LeaseLost.
    def fail(jid, lease_token, error: nil, exception_class: nil, retry: nil, cancelled: nil)
      # `retry` is a keyword of the language: the argument is read through the binding.
      again = binding.local_variable_get(:retry)
      request(:post, "/worker/jobs/#{segment(jid)}/fail",
              compact("lease_token" => lease_token, "error" => error, "exception_class" => exception_class,
                      "retry" => again, "cancelled" => cancelled)).fetch("status")
    end

    # Report a worker stopped. Returns false if it was stopped already.
    # Raises NotFound for an unknown name, Forbidden for another token's worker.
    def stop_worker(name)
      request(:post, "/worker/stop", { "name" => name }).fetch("stopped")
    end

    # One request: method (:get, :post, :delete), path below /sdk (percent-encoded),
    # body (JSON-able or nil), query (Hash, nil values left out). Returns the parsed
    # JSON answer. Raises the JobQueue::Error subclass of a refusal; Unreachable
    # (status 0) when no answer came within the timeout (+ extra_timeout seconds).
    def request(method, path, body = nil, query: nil, extra_timeout: 0)
      uri = URI("#{@base_url}#{path}")
      query = compact(query || {})
      uri.query = URI.encode_www_form(query) unless query.empty?
      request = build(method, uri, body)
      response = send_request(uri, request, @timeout + extra_timeout)
      parse(response, uri)
    end

    # The JobIn body of one job (Hash with String keys, nil options left out).
    def self.job_body(job_type, payload, options)
      unknown = options.keys.map(&:to_sym) - ENQUEUE_OPTIONS
      raise ArgumentError, "unknown enqueue option(s) #{unknown.join(", ")}" unless unknown.empty?

      body = { "job_type" => job_type }
      body["payload"] = payload unless payload.nil?
      options.each do |key, value|
        next if value.nil?

        body[key.to_s] = value.is_a?(Time) ? value.iso8601(6) : value
      end
      body
    end

    private

    def compact(hash) = hash.reject { |_, value| value.nil? }

    def segment(text) = URI.encode_www_form_component(text.to_s).gsub("+", "%20")

    def build(method, uri, body)
      klass = { get: Net::HTTP::Get, post: Net::HTTP::Post, delete: Net::HTTP::Delete }.fetch(method)
      request = klass.new(uri)
      request["Authorization"] = "Bearer #{@token}"
      request["Accept"] = "application/json"
      request["User-Agent"] = "jobqueue-client-ruby/#{VERSION}"
      unless body.nil?
        request["Content-Type"] = "application/json"
        request.body = JSON.generate(body)
      end
      request
    end

    def send_request(uri, request, timeout)
      Net::HTTP.start(uri.host, uri.port, use_ssl: uri.scheme == "https",
                                          open_timeout: @timeout, read_timeout: timeout,
                                          write_timeout: timeout) do |http|
        http.request(request)
      end
    rescue Net::OpenTimeout, Net::ReadTimeout, Net::WriteTimeout
      raise Error.for(0, { "error" => "timeout", "detail" => "no answer from #{uri} within #{timeout} s" })
    rescue SystemCallError, IOError, SocketError, OpenSSL::SSL::SSLError, EOFError => e
      raise Error.for(0, { "error" => "connection_failed", "detail" => "cannot reach #{uri}: #{e.message}" })
    end

    def parse(response, uri)
      status = response.code.to_i
      text = response.body.to_s
      data = begin
        text.empty? ? nil : JSON.parse(text)
      rescue JSON::ParserError
        nil
      end
      return data if status.between?(200, 299) && (!data.nil? || text.empty?)

      unless data.is_a?(Hash) && data["error"]
        data = { "error" => status.between?(200, 299) ? "bad_answer" : "http_#{status}",
                 "detail" => "#{uri} answered #{status}: #{text[0, 200]}" }
      end
      raise Error.for(status, data, response["Retry-After"])
    end
  end

  # The id verbs (docs/design.md#ids): a queue's jobs named by an id, one job per id.
  # The id may contain "/"; each segment is percent-encoded.
  class IdVerbs
    # The default of `value`: leave it out of the body (nil sends JSON null).
    NOT_GIVEN = Object.new.freeze

    def initialize(client)
      @client = client
    end

    # Enqueue a job holding this id unless one holds it. value: the payload;
    # job_type: default the queue's one job type; at (Time or ISO 8601) or delay.
    # Returns true if added, false if the id was held.
    def add(queue, id, value: NOT_GIVEN, job_type: nil, at: nil, delay: nil)
      post(queue, id, "add", value: value, job_type: job_type, at: at, delay: delay).fetch("added")
    end

    # Enqueue or replace the job holding this id (a running one runs once more). Returns true.
    def set(queue, id, value: NOT_GIVEN, job_type: nil, at: nil, delay: nil)
      post(queue, id, "set", value: value, job_type: job_type, at: at, delay: delay).fetch("set")
    end

    # Change the waiting job holding this id. Returns false if none was changed.
    def update(queue, id, value: NOT_GIVEN, job_type: nil, at: nil, delay: nil)
      post(queue, id, "update", value: value, job_type: job_type, at: at, delay: delay).fetch("updated")
    end

    # Cancel the job holding this id. Returns false if none was cancelled.
    def cancel(queue, id)
      @client.request(:post, "#{path(queue, id)}/cancel", {}).fetch("cancelled")
    end

    # The job holding this id (Hash, IdJobOut), or nil when the id is free.
    def get(queue, id)
      @client.request(:get, path(queue, id))
    rescue NotFound
      nil
    end

    # A page of the queue's id jobs: {"jobs" => [IdJobOut], "next" => cursor or nil}.
    # prefix: ids starting with it; state: a state word; limit: page size; cursor: a "next".
    def list(queue, prefix: nil, state: nil, limit: nil, cursor: nil)
      @client.request(:get, "/queues/#{enc(queue)}/jobs",
                      query: { "prefix" => prefix, "state" => state, "limit" => limit, "cursor" => cursor })
    end

    private

    def post(queue, id, verb, value:, job_type:, at:, delay:)
      body = { "job_type" => job_type, "at" => at.is_a?(Time) ? at.iso8601(6) : at, "delay" => delay }.compact
      body["value"] = value unless value.equal?(NOT_GIVEN)
      @client.request(:post, "#{path(queue, id)}/#{verb}", body)
    end

    def path(queue, id) = "/queues/#{enc(queue)}/ids/#{id.to_s.split("/", -1).map { |part| enc(part) }.join("/")}"

    def enc(text) = URI.encode_www_form_component(text.to_s).gsub("+", "%20")
  end
end
