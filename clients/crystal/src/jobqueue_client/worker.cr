require "json"
require "system"

require "./client"
require "./job"

module JobQueue
  # A run's counts.
  record Stats, claimed : Int32 = 0, done : Int32 = 0, failed : Int32 = 0, cancelled : Int32 = 0,
    lease_lost : Int32 = 0

  # A worker loop over the gateway's worker protocol (docs/gateway.md, "The worker
  # protocol"): register, long-poll claims, run each job in a fiber of its own (at
  # most *concurrency* at once) with a heartbeat every heartbeat_ms, report complete or
  # fail, and on `stop` (or SIGTERM/SIGINT) claim no more, finish and report the running
  # jobs (those of a claim in flight too), then report the stop.
  #
  # ```
  # worker = JobQueue::Worker.new(jq, ["hello"], concurrency: 4)
  # worker.register(Greet) # a JobQueue::Job class
  # worker.handle("hello.wave") { |payload, ctx| {waved: payload["name"]} }
  # stats = worker.run # until stop or SIGTERM
  # ```
  #
  # Fibers share one thread: a handler that computes for long should `Fiber.yield` now
  # and then, or its heartbeats wait.
  class Worker
    # Longest error message and exception class name sent in a fail report.
    MAX_ERROR = 10_000
    MAX_CLASS =    200

    # A handler: the job's payload and context in, the result's JSON text out.
    alias Handler = Proc(JSON::Any, Context, String)

    private record Outcome, result_json : String? = nil, error : Exception? = nil

    getter client : Client
    # The registered name.
    getter name : String
    getter stats : Stats = Stats.new
    @handlers = {} of String => Handler
    @stopping = false
    @running = 0
    @heartbeat_ms : Int64?
    @max_wait_ms = 30_000_i64

    # *client*: a Client with the work scope on *queues*; *concurrency*: jobs run at
    # once (1..100); *name*: the registered name (default "<host>-<pid>-cr");
    # *wait_ms*: a claim's long-poll (default 5000, the gateway caps it); *lease_ms*:
    # the lease asked for (default: the site's LEASE_MS); *heartbeat_ms*: default the
    # registration's; *handle_signals*: stop on SIGTERM and SIGINT (a second one exits
    # at once); *log*: where "jobqueue-worker: LEVEL message" lines go.
    # Raises ArgumentError on no queue or a concurrency off 1..100.
    def initialize(@client : Client, @queues : Array(String), *, @concurrency : Int32 = 1, name : String? = nil,
                   @wait_ms : Int32 = 5000, @lease_ms : Int32? = nil, heartbeat_ms : Int? = nil,
                   @handle_signals : Bool = true, @log : IO = STDERR)
      raise ArgumentError.new("queues must name at least one queue") if @queues.empty?
      unless 1 <= @concurrency <= 100
        raise ArgumentError.new("concurrency must be an integer 1..100, got #{@concurrency}")
      end
      @name = name || "#{System.hostname}-#{Process.pid}-cr"
      @heartbeat_ms = heartbeat_ms.try(&.to_i64)
      @wake = Channel(Nil).new(1)
    end

    # Run a JoobQ-style job class (see `JobQueue::Job`) for its job type: a new
    # instance's `perform(payload, ctx)` per run.
    def register(job : T.class) : self forall T
      @handlers[T.job_type] = Handler.new { |payload, ctx| T.new.perform(payload, ctx).to_json }
      self
    end

    # Run the block for jobs of *job_type*; its value (anything with `to_json`) is the result.
    def handle(job_type : String, &block : JSON::Any, Context -> T) : self forall T
      @handlers[job_type] = Handler.new { |payload, ctx| block.call(payload, ctx).to_json }
      self
    end

    # Whether `stop` was called (or a signal came).
    def stopping? : Bool
      @stopping
    end

    # Claim no more; `run` returns once the running jobs have been reported.
    def stop : Nil
      unless @stopping
        @stopping = true
        log("INFO", "stopping: #{@running} running job(s) finish first")
      end
      wake
    end

    # Register, then claim and run jobs until `stop` (or SIGTERM/SIGINT). Returns the
    # counts once every running job and the stop have been reported. Raises
    # `JobQueue::Error` when the gateway refuses the token or the registration
    # (Unauthorized, Forbidden, ...); an unreachable gateway, 503 and 429 are retried
    # with backoff. Raises ArgumentError when no handler was given.
    def run : Stats
      raise ArgumentError.new("no handler: call register or handle first") if @handlers.empty?
      trap_signals if @handle_signals
      begin
        registration = retrying do
          @client.register(@queues, name: @name, host: System.hostname, pid: Process.pid, languages: ["crystal"],
            job_types: @handlers.keys, concurrency: @concurrency, version: VERSION)
        end
        if registration
          @heartbeat_ms ||= registration.heartbeat_ms
          @max_wait_ms = registration.max_wait_ms if registration.max_wait_ms > 0
          log("INFO", "registered #{@name}: queues=#{@queues.join(",")} job_types=#{@handlers.keys.join(",")} " \
                      "concurrency=#{@concurrency}")
          claim_loop
          drain
          begin
            # Gone from the console and `jobqueue status` at once, not three heartbeats later.
            @client.stop_worker(@name)
          rescue e : Error
            log("WARNING", "could not report the stop of #{@name}: #{e.message}")
          end
        end
      ensure
        drain
        restore_signals if @handle_signals
      end
      s = @stats
      log("INFO", "stopped: claimed=#{s.claimed} done=#{s.done} failed=#{s.failed} cancelled=#{s.cancelled} " \
                  "lease_lost=#{s.lease_lost}")
      s
    end

    private def trap_signals : Nil
      {Signal::TERM, Signal::INT}.each do |signal|
        signal.trap do
          exit 1 if @stopping # a second signal forces
          log("INFO", "#{signal} received")
          stop
        end
      end
    end

    private def restore_signals : Nil
      Signal::TERM.reset
      Signal::INT.reset
    end

    private def log(level : String, message : String) : Nil
      @log.puts "jobqueue-worker: #{level} #{message}"
      @log.flush
    end

    private def wake : Nil
      select
      when @wake.send(nil)
      else
      end
    end

    # Sleep up to *span*, woken early by `stop` or a finished job.
    private def pause(span : Time::Span) : Nil
      select
      when @wake.receive
      when timeout(span)
      end
    end

    # Call the block until it answers; back off on an unreachable gateway, 503 or 429.
    # Returns nil once stopping.
    private def retrying(&)
      backoff = 0.5
      until @stopping
        begin
          return yield
        rescue e : ServiceUnavailable | RateLimited
          wait = e.retry_after || backoff
          log("WARNING", "#{e.message}; trying again in #{(wait * 1000).round.to_i} ms")
          pause(wait.seconds)
          backoff = {backoff * 2, 10.0}.min
        end
      end
      nil
    end

    private def claim_loop : Nil
      until @stopping
        if @running >= @concurrency
          pause(1.second)
          next
        end
        wait_ms = {@wait_ms.to_i64, @max_wait_ms}.min
        asked = Time.monotonic
        jobs = retrying do
          @client.claim(@queues, job_types: @handlers.keys, limit: @concurrency - @running, wait_ms: wait_ms,
            worker: @name, lease_ms: @lease_ms)
        end
        # A claim answered while stopping still runs its jobs: they are held under our lease.
        (jobs || [] of ClaimedJob).each { |job| start(job) }
        if jobs && jobs.empty? && wait_ms > 0 && Time.monotonic - asked < (wait_ms // 2).milliseconds
          # No jobs long before the wait ended: a WSGI server at its cap of waiting
          # claims answered at once (Retry-After: 1 s); claim again after it.
          pause(1.second)
        end
      end
    end

    private def drain : Nil
      while @running > 0
        pause(100.milliseconds)
      end
    end

    private def start(job : ClaimedJob) : Nil
      @stats = @stats.copy_with(claimed: @stats.claimed + 1)
      @running += 1
      spawn(name: "job #{job.jid}") do
        execute(job)
      ensure
        @running -= 1
        wake
      end
    end

    # Run one claimed job and report it; never raises.
    private def execute(job : ClaimedJob) : Nil
      ctx = Context.new(job)
      outcome = run_handler(job, ctx)
      return dropped(job) if ctx.lease_lost?
      report(job, ctx, outcome)
    rescue LeaseLost
      dropped(job)
    rescue e
      log("ERROR", "report of #{job.jid} failed: #{e.class}: #{e.message}")
    end

    # The handler's outcome, with heartbeats while it runs; past the job's timeout_ms
    # the attempt fails (the handler's fiber cannot be killed: its late outcome is dropped).
    private def run_handler(job : ClaimedJob, ctx : Context) : Outcome
      handler = @handlers[job.job_type]?
      return Outcome.new(error: ArgumentError.new("no handler for job type #{job.job_type}")) unless handler
      done = Channel(Outcome).new(1)
      spawn(name: "handler #{job.jid}") do
        outcome = begin
          Outcome.new(result_json: handler.call(job.payload, ctx))
        rescue e
          Outcome.new(error: e)
        end
        done.send(outcome)
      end
      deadline = Time.monotonic + (job.timeout_ms > 0 ? job.timeout_ms : 3_600_000_i64).milliseconds
      beat = (@heartbeat_ms || 15_000_i64).milliseconds
      loop do
        remaining = deadline - Time.monotonic
        return Outcome.new(error: JobTimeout.new("timed out after #{job.timeout_ms} ms")) if remaining <= Time::Span.zero
        select
        when outcome = done.receive
          return outcome
        when timeout({beat, remaining}.min)
          heartbeat(job, ctx) if Time.monotonic < deadline
        end
      end
    end

    private def heartbeat(job : ClaimedJob, ctx : Context) : Nil
      return if ctx.lease_lost?
      ctx.cancel_requested! if @client.heartbeat(job.jid, job.lease_token, @lease_ms)
    rescue LeaseLost
      ctx.lease_lost!
    rescue e : Error
      log("WARNING", "heartbeat of #{job.jid} failed: #{e.message}")
    end

    private def report(job : ClaimedJob, ctx : Context, outcome : Outcome) : Nil
      if result = outcome.result_json
        reporting { @client.complete_json(job.jid, job.lease_token, result) }
        @stats = @stats.copy_with(done: @stats.done + 1)
        return
      end
      error = outcome.error || Exception.new("no outcome")
      cancelled = ctx.cancel_requested?
      exception_class = error.is_a?(JobTimeout) ? "TimeoutError" : error.class.name
      message = error.message.presence || exception_class
      status = reporting do
        @client.fail(job.jid, job.lease_token, error: message[0, MAX_ERROR], exception_class: exception_class[0, MAX_CLASS],
          retry: !error.is_a?(PermanentFailure), cancelled: cancelled)
      end
      @stats = cancelled ? @stats.copy_with(cancelled: @stats.cancelled + 1) : @stats.copy_with(failed: @stats.failed + 1)
      log("WARNING", "job #{job.jid} (#{job.job_type}) failed: #{exception_class}; stored #{status}")
    end

    # A report, retried while the gateway is unreachable (the lease bounds this).
    private def reporting(&)
      backoff = 0.25
      tries = 0
      loop do
        tries += 1
        begin
          return yield
        rescue e : ServiceUnavailable | RateLimited
          raise e if tries >= 8
          sleep (e.retry_after || backoff).seconds
          backoff = {backoff * 2, 5.0}.min
        end
      end
    end

    private def dropped(job : ClaimedJob) : Nil
      @stats = @stats.copy_with(lease_lost: @stats.lease_lost + 1)
      log("WARNING", "job #{job.jid} (#{job.job_type}): lease lost, outcome dropped")
    end
  end

  # The error of an attempt past its job's timeout_ms (reported as "TimeoutError").
  class JobTimeout < Exception
  end
end
