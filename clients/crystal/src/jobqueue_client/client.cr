require "http/client"
require "json"
require "uri"

require "./errors"
require "./answers"

module JobQueue
  # A delay: "500ms", "5s", "1m", or a number of seconds.
  alias Delay = String | Int32 | Int64 | Float64
  # A moment: a Time (sent as ISO 8601 with its offset) or ISO 8601 text.
  alias Moment = Time | String

  # One job of an enqueue or a batch: its type, its payload (any value with `to_json`),
  # and every JobIn option (docs/gateway.md, "Routes"); nil options are left out.
  struct JobSpec
    getter job_type : String
    # The payload's JSON text, or nil for none.
    getter payload_json : String?
    getter queue : String?
    # 1 runs first.
    getter priority : Int64?
    getter delay : Delay?
    getter run_at : Moment?
    getter expires_ms : Int64?
    getter timeout_ms : Int64?
    getter max_retry : Int64?
    getter unique_key : String?
    # "while_locked", "until_executing" or "until_executed" (the last two are Pro).
    getter unique_mode : String?
    getter unique_ttl_ms : Int64?
    # The id the job holds (docs/design.md#ids).
    getter id : String?
    # The key a partitioned limit counts the job under (docs/limits.md).
    getter limit_key : String?
    # An open batch's id the job joins (docs/workflows.md); `enqueue` only, not a batch.
    getter batch : Int64?
    # The jids the job waits for (docs/workflows.md): it is "blocked" until each is
    # done. `enqueue` only, not a batch.
    getter after : Array(String)?
    # What an upstream job's death does to it: "cancel" (the default), "skip" or
    # "ignore"; with `after`.
    getter on_upstream_failure : String?

    def initialize(@job_type : String, payload = nil, *, @queue : String? = nil, priority : Int? = nil,
                   @delay : Delay? = nil, @run_at : Moment? = nil, expires_ms : Int? = nil,
                   timeout_ms : Int? = nil, max_retry : Int? = nil, @unique_key : String? = nil,
                   @unique_mode : String? = nil, unique_ttl_ms : Int? = nil, @id : String? = nil,
                   @limit_key : String? = nil, batch : Int? = nil, after : Enumerable(String)? = nil,
                   @on_upstream_failure : String? = nil)
      @payload_json = payload.nil? ? nil : payload.to_json
      @priority = priority.try(&.to_i64)
      @expires_ms = expires_ms.try(&.to_i64)
      @timeout_ms = timeout_ms.try(&.to_i64)
      @max_retry = max_retry.try(&.to_i64)
      @unique_ttl_ms = unique_ttl_ms.try(&.to_i64)
      @batch = batch.try(&.to_i64)
      @after = after.try(&.to_a)
    end

    # The JobIn body.
    def to_json(json : JSON::Builder) : Nil
      json.object do
        json.field "job_type", job_type
        if text = payload_json
          json.field("payload") { json.raw(text) }
        end
        Client.field(json, "queue", queue)
        Client.field(json, "priority", priority)
        Client.field(json, "delay", delay)
        Client.field(json, "run_at", run_at)
        Client.field(json, "expires_ms", expires_ms)
        Client.field(json, "timeout_ms", timeout_ms)
        Client.field(json, "max_retry", max_retry)
        Client.field(json, "unique_key", unique_key)
        Client.field(json, "unique_mode", unique_mode)
        Client.field(json, "unique_ttl_ms", unique_ttl_ms)
        Client.field(json, "id", id)
        Client.field(json, "limit_key", limit_key)
        Client.field(json, "batch", batch)
        Client.field(json, "after", after)
        Client.field(json, "on_upstream_failure", on_upstream_failure)
      end
    end
  end

  # A client of the HTTP SDK gateway (docs/gateway.md): the producer calls and the
  # worker protocol's calls. Every refusal raises the `JobQueue::Error` subclass of
  # its code. Each request opens its own connection, so fibers share one client.
  #
  # ```
  # jq = JobQueue::Client.new("http://127.0.0.1:8000", "jqt_...")
  # jq.enqueue("emails.send", {to: "a@example.com"}, queue: "emails", delay: "5s")
  # ```
  class Client
    # The gateway's root, ending in "/sdk".
    getter base_url : String
    @base : URI

    # *url*: the site's root ("http://127.0.0.1:8000") or the gateway's (".../sdk");
    # *token*: an API token ("jqt_...", manage.py jobqueue token create); *timeout*: how
    # long a request may take (a claim adds its wait_ms). Raises ArgumentError on a
    # missing url or token.
    def initialize(url : String, token : String, @timeout : Time::Span = 30.seconds)
      raise ArgumentError.new("url is required (the site's root, e.g. http://127.0.0.1:8000)") if url.empty?
      raise ArgumentError.new("token is required (manage.py jobqueue token create)") if token.empty?
      root = url.rstrip('/')
      @base_url = root.ends_with?("/sdk") ? root : "#{root}/sdk"
      @base = URI.parse(@base_url)
      @token = token
    end

    # The id verbs.
    def ids : IdVerbs
      IdVerbs.new(self)
    end

    # Enqueue one job: *payload* is any value with `to_json`; the options are JobIn's
    # (see `JobSpec`). Raises InvalidRequest (422), DuplicateJob (409, a held id),
    # ProRequired (402), Forbidden (403).
    def enqueue(job_type : String, payload = nil, **options) : EnqueueResult
      enqueue(JobSpec.new(job_type, payload, **options))
    end

    # :ditto:
    def enqueue(job : JobSpec) : EnqueueResult
      EnqueueResult.new(request("POST", "/jobs", job.to_json))
    end

    # Enqueue jobs all or nothing; one result per job, in order. Raises as `enqueue`
    # for the first refused job (its `index`); nothing is stored then.
    def enqueue_batch(jobs : Enumerable(JobSpec)) : Array(EnqueueResult)
      body = JSON.build { |json| json.object { json.field("jobs") { json.array { jobs.each(&.to_json(json)) } } } }
      request("POST", "/jobs/batch", body)["results"].as_a.map { |result| EnqueueResult.new(result) }
    end

    # The job with this jid. Raises NotFound when there is none.
    def get_job(jid : String) : StoredJob
      StoredJob.new(request("GET", "/jobs/#{Client.segment(jid)}"))
    end

    # Cancel a job: a waiting one at once, a running one by request (its worker sees
    # cancel_requested).
    def cancel(jid : String) : NamedTuple(cancelled: Bool, cancel_requested: Bool)
      answer = request("POST", "/jobs/#{Client.segment(jid)}/cancel", "{}")
      {cancelled: answer["cancelled"].as_bool, cancel_requested: answer["cancel_requested"].as_bool}
    end

    # Make a failed or cancelled job due again (admin scope); true if it was.
    def retry(jid : String) : Bool
      request("POST", "/jobs/#{Client.segment(jid)}/retry", "{}")["retried"].as_bool
    end

    # Register a worker (*name* nil: one is made). Raises Forbidden for another token's name.
    def register(queues : Array(String), *, name : String? = nil, host : String? = nil, pid : Int? = nil,
                 languages : Array(String)? = nil, job_types : Array(String)? = nil,
                 concurrency : Int? = nil, version : String? = nil) : Registration
      body = JSON.build do |json|
        json.object do
          Client.field(json, "name", name)
          Client.field(json, "host", host)
          Client.field(json, "pid", pid)
          Client.field(json, "languages", languages)
          json.field "queues", queues
          Client.field(json, "job_types", job_types)
          Client.field(json, "concurrency", concurrency)
          Client.field(json, "version", version)
        end
      end
      Registration.new(request("POST", "/worker/register", body))
    end

    # Claim up to *limit* (1..100) due jobs, waiting up to *wait_ms* (0..30000 ms) for one.
    def claim(queues : Array(String), *, job_types : Array(String)? = nil, limit : Int? = nil,
              wait_ms : Int? = nil, worker : String? = nil, lease_ms : Int? = nil) : Array(ClaimedJob)
      body = JSON.build do |json|
        json.object do
          json.field "queues", queues
          Client.field(json, "job_types", job_types)
          Client.field(json, "limit", limit)
          Client.field(json, "wait_ms", wait_ms)
          Client.field(json, "worker", worker)
          Client.field(json, "lease_ms", lease_ms)
        end
      end
      answer = request("POST", "/worker/claim", body, extra: (wait_ms || 0).milliseconds)
      answer["jobs"].as_a.map { |job| ClaimedJob.new(job) }
    end

    # Extend a claimed job's lease (*lease_ms*: default the site's LEASE_MS); true when
    # a cancel was requested. Raises LeaseLost when the job is no longer held.
    def heartbeat(jid : String, lease_token : String, lease_ms : Int? = nil) : Bool
      body = JSON.build do |json|
        json.object do
          json.field "lease_token", lease_token
          Client.field(json, "lease_ms", lease_ms)
        end
      end
      request("POST", "/worker/jobs/#{Client.segment(jid)}/heartbeat", body)["cancel_requested"].as_bool
    end

    # Report a claimed job done with its result (any value with `to_json`); returns the
    # stored status ("done"; "init" when an id's set asked for one run more). Raises LeaseLost.
    def complete(jid : String, lease_token : String, result = nil) : String
      complete_json(jid, lease_token, result.to_json)
    end

    # `complete` with the result as JSON text.
    def complete_json(jid : String, lease_token : String, result_json : String) : String
      body = JSON.build do |json|
        json.object do
          json.field "lease_token", lease_token
          json.field("result") { json.raw(result_json) }
        end
      end
      request("POST", "/worker/jobs/#{Client.segment(jid)}/complete", body)["status"].as_s
    end

    # Report a claimed job failed: *error* the message, *exception_class* the error's
    # class, *retry* false dead-letters it at once, *cancelled* true after a cancel
    # request. Returns the stored status ("retry", "max_retry", "error", "cancelled", ...).
    # Raises LeaseLost.
    def fail(jid : String, lease_token : String, *, error : String? = nil, exception_class : String? = nil,
             retry : Bool? = nil, cancelled : Bool? = nil) : String
      body = JSON.build do |json|
        json.object do
          json.field "lease_token", lease_token
          Client.field(json, "error", error)
          Client.field(json, "exception_class", exception_class)
          Client.field(json, "retry", retry)
          Client.field(json, "cancelled", cancelled)
        end
      end
      request("POST", "/worker/jobs/#{Client.segment(jid)}/fail", body)["status"].as_s
    end

    # Report a worker stopped; false if it was stopped already. Raises NotFound for an
    # unknown name, Forbidden for another token's worker.
    def stop_worker(name : String) : Bool
      request("POST", "/worker/stop", {name: name}.to_json)["stopped"].as_bool
    end

    # One request: *path* below /sdk (percent-encoded), *body* JSON text or nil,
    # *query* (nil values left out). Returns the parsed answer. Raises the
    # `JobQueue::Error` subclass of a refusal; `Unreachable` (status 0) when no answer
    # came within the timeout (+ *extra*).
    def request(method : String, path : String, body : String? = nil, query : Hash(String, String?)? = nil,
                extra : Time::Span = Time::Span.zero) : JSON::Any
      target = "#{@base.path}#{path}"
      if query && query.values.any?
        target += "?" + URI::Params.build { |params| query.each { |key, value| params.add(key, value) if value } }
      end
      headers = HTTP::Headers{"Authorization" => "Bearer #{@token}", "Accept" => "application/json",
                              "User-Agent" => "jobqueue-client-crystal/#{VERSION}"}
      headers["Content-Type"] = "application/json" if body
      response = begin
        http = HTTP::Client.new(@base)
        http.connect_timeout = @timeout
        http.read_timeout = @timeout + extra
        http.write_timeout = @timeout
        begin
          http.exec(method, target, headers, body)
        ensure
          http.close
        end
      rescue e : IO::TimeoutError
        raise Error.unreachable("timeout", "no answer from #{@base_url}#{path} within #{(@timeout + extra).total_milliseconds.to_i} ms")
      rescue e : Socket::Error | IO::Error
        raise Error.unreachable("connection_failed", "cannot reach #{@base_url}#{path}: #{e.message}")
      end
      parse(response, path)
    end

    private def parse(response : HTTP::Client::Response, path : String) : JSON::Any
      status = response.status_code
      text = response.body
      data = begin
        text.empty? ? nil : JSON.parse(text)
      rescue JSON::ParseException
        nil
      end
      return data if data && (200..299).includes?(status)
      unless data && data.as_h? && data["error"]?
        code = (200..299).includes?(status) ? "bad_answer" : "http_#{status}"
        data = JSON::Any.new({"error"  => JSON::Any.new(code),
                              "detail" => JSON::Any.new("#{@base_url}#{path} answered #{status}: #{text[0, 200]?}")})
      end
      raise Error.for(status, data, response.headers["Retry-After"]?)
    end

    # Write a member unless its value is nil (a Time as ISO 8601 with its offset).
    def self.field(json : JSON::Builder, name : String, value) : Nil
      case value
      when Nil
      when Time then json.field name, value.to_rfc3339(fraction_digits: 6)
      else           json.field name, value
      end
    end

    # A path segment, percent-encoded.
    def self.segment(text : String) : String
      URI.encode_path_segment(text)
    end
  end

  # The id verbs (docs/design.md#ids): a queue's jobs named by an id, one job per id.
  # The id may contain "/"; each segment is percent-encoded. *value* is the payload
  # (any value with `to_json`; left out when not given), *job_type* defaults to the
  # queue's one job type, *at* or *delay* schedule it.
  struct IdVerbs
    def initialize(@client : Client)
    end

    # Enqueue a job holding this id unless one holds it; false if the id was held.
    def add(queue : String, id : String, value = Unset.new, *, job_type : String? = nil, at : Moment? = nil,
            delay : Delay? = nil) : Bool
      post(queue, id, "add", value, job_type, at, delay)["added"].as_bool
    end

    # Enqueue or replace the job holding this id (a running one runs once more).
    def set(queue : String, id : String, value = Unset.new, *, job_type : String? = nil, at : Moment? = nil,
            delay : Delay? = nil) : Bool
      post(queue, id, "set", value, job_type, at, delay)["set"].as_bool
    end

    # Change the waiting job holding this id; false if none was changed.
    def update(queue : String, id : String, value = Unset.new, *, job_type : String? = nil, at : Moment? = nil,
               delay : Delay? = nil) : Bool
      post(queue, id, "update", value, job_type, at, delay)["updated"].as_bool
    end

    # Cancel the job holding this id; false if none was cancelled.
    def cancel(queue : String, id : String) : Bool
      @client.request("POST", "#{path(queue, id)}/cancel", "{}")["cancelled"].as_bool
    end

    # The job holding this id, or nil when the id is free.
    def get(queue : String, id : String) : IdJob?
      IdJob.new(@client.request("GET", path(queue, id)))
    rescue NotFound
      nil
    end

    # A page of the queue's id jobs: *prefix* of the ids, *state* word, *limit*, *cursor* (a `Page#next`).
    def list(queue : String, *, prefix : String? = nil, state : String? = nil, limit : Int? = nil,
             cursor : String? = nil) : Page
      query = {"prefix" => prefix, "state" => state, "limit" => limit.try(&.to_s), "cursor" => cursor}
      Page.new(@client.request("GET", "/queues/#{Client.segment(queue)}/jobs", query: query))
    end

    # The default of *value*: left out of the body (nil sends JSON null).
    struct Unset
    end

    private def post(queue, id, verb, value, job_type, at, delay) : JSON::Any
      body = JSON.build do |json|
        json.object do
          json.field("value") { value.to_json(json) } unless value.is_a?(Unset)
          Client.field(json, "job_type", job_type)
          Client.field(json, "at", at)
          Client.field(json, "delay", delay)
        end
      end
      @client.request("POST", "#{path(queue, id)}/#{verb}", body)
    end

    private def path(queue : String, id : String) : String
      "/queues/#{Client.segment(queue)}/ids/#{id.split('/', remove_empty: false).map { |part| Client.segment(part) }.join('/')}"
    end
  end
end
