# frozen_string_literal: true

require "logger"
require "socket"

require_relative "client"
require_relative "job"
require_relative "version"

module JobQueue
  # A worker loop over the gateway's worker protocol (docs/gateway.md, "The worker
  # protocol"): register, long-poll claims, run each job in its own thread (at most
  # `concurrency` at once) with a heartbeat every heartbeat_ms, report complete or
  # fail, and on stop (or SIGTERM/SIGINT) claim no more, finish and report the running
  # jobs (those of a claim in flight too), then report the stop.
  #
  #   worker = JobQueue::Worker.new(jq, { "hello.greet" => Greet }, queues: ["hello"], concurrency: 4)
  #   stats = worker.run   # until stop or SIGTERM
  #
  # handlers: job type => a job class (JobQueue::Job: a new instance's perform(payload,
  # ctx) per run), an object with perform(payload, ctx), or a callable (payload, ctx);
  # an Array of job classes takes their job_type; the default is JobQueue::Job.registry.
  class Worker
    # Longest error message and exception class name sent in a fail report.
    MAX_ERROR = 10_000
    MAX_CLASS = 200

    # The client it talks through; the registered name (String).
    attr_reader :client, :name

    # client: a JobQueue::Client with the `work` scope on the queues.
    # queues: Array of queue names. concurrency: jobs run at once (1..100).
    # name: the registered name (default "<host>-<pid>-rb").
    # wait_ms: a claim's long-poll, ms (default 5000; the gateway caps it).
    # lease_ms: lease asked for each claim and heartbeat, ms (default: the site's LEASE_MS).
    # heartbeat_ms: heartbeat interval, ms (default: the registration's heartbeat_ms).
    # handle_signals: stop on SIGTERM and SIGINT (default true; a second one exits at once).
    # logger: a Logger (default: stderr, "jobqueue-worker: LEVEL message").
    # Raises ArgumentError on no handler, no queue, or a concurrency off 1..100.
    def initialize(client, handlers = Job.registry, queues:, concurrency: 1, name: nil, wait_ms: 5000,
                   lease_ms: nil, heartbeat_ms: nil, handle_signals: true, logger: nil)
      @handlers = normalize(handlers)
      raise ArgumentError, "queues must name at least one queue" if Array(queues).empty?
      unless concurrency.is_a?(Integer) && concurrency.between?(1, 100)
        raise ArgumentError, "concurrency must be an integer 1..100, got #{concurrency.inspect}"
      end

      @client = client
      @queues = Array(queues).map(&:to_s)
      @concurrency = concurrency
      @name = name || "#{Socket.gethostname}-#{Process.pid}-rb"
      @wait_ms = wait_ms
      @lease_ms = lease_ms
      @heartbeat_ms = heartbeat_ms
      @handle_signals = handle_signals
      @logger = logger || default_logger
      @mutex = Mutex.new
      @changed = ConditionVariable.new
      @running = {}
      @stopping = false
      @stats = { claimed: 0, done: 0, failed: 0, cancelled: 0, lease_lost: 0 }
    end

    # The run's counts so far: {claimed:, done:, failed:, cancelled:, lease_lost:}.
    def stats = @mutex.synchronize { @stats.dup }

    # Whether stop was called (or a signal came).
    def stopping? = @stopping

    # Claim no more; run returns once the running jobs have been reported. Not from a
    # trap handler (run's own handlers call it from a thread).
    def stop
      @mutex.synchronize do
        unless @stopping
          @stopping = true
          @logger.info("stopping: #{@running.size} running job(s) finish first")
        end
        @changed.broadcast
      end
    end

    # Register, then claim and run jobs until stop (or SIGTERM/SIGINT). Returns the
    # counts (see #stats) once every running job has been reported and the stop too.
    # Raises JobQueue::Error when the gateway refuses the token or the registration
    # (Unauthorized, Forbidden, ...); an unreachable gateway, 503 and 429 are retried
    # with backoff.
    def run
      previous = trap_signals if @handle_signals
      begin
        registration = retrying { register }
        return stats if registration.nil?

        @heartbeat_ms ||= registration.fetch("heartbeat_ms")
        @max_wait_ms = registration.fetch("max_wait_ms", 30_000)
        @logger.info("registered #{@name}: queues=#{@queues.join(",")} job_types=#{@handlers.keys.join(",")} " \
                     "concurrency=#{@concurrency}")
        loop_claims
        drain
        report_stop
      ensure
        drain
        restore_signals(previous) if previous
      end
      s = stats
      @logger.info("stopped: claimed=#{s[:claimed]} done=#{s[:done]} failed=#{s[:failed]} " \
                   "cancelled=#{s[:cancelled]} lease_lost=#{s[:lease_lost]}")
      s
    end

    private

    def default_logger
      logger = Logger.new($stderr)
      logger.formatter = proc { |severity, _time, _prog, message| "jobqueue-worker: #{severity} #{message}\n" }
      logger
    end

    def normalize(handlers)
      table = if handlers.is_a?(Array)
                handlers.to_h { |klass| [klass.job_type, klass] }
              else
                handlers.to_h { |type, handler| [type.to_s, handler] }
              end
      if table.empty? || table.any? { |type, handler| type.to_s.empty? || !callable?(handler) }
        raise ArgumentError, "handlers must map at least one job type to a job class, a perform(payload, ctx) " \
                             "object or a callable"
      end
      table
    end

    def callable?(handler)
      (handler.is_a?(Class) && handler.method_defined?(:perform)) || handler.respond_to?(:perform) ||
        handler.respond_to?(:call)
    end

    def register
      @client.register(name: @name, host: Socket.gethostname, pid: Process.pid, languages: ["ruby"],
                       queues: @queues, job_types: @handlers.keys, concurrency: @concurrency, version: VERSION)
    end

    def trap_signals
      %w[TERM INT].to_h do |signal|
        [signal, Signal.trap(signal) do
          # A trap handler cannot take a mutex: stop from a thread. A second signal forces.
          Process.exit!(1) if @stopping
          Thread.new { @logger.info("SIG#{signal} received"); stop }
        end]
      end
    end

    def restore_signals(previous)
      previous.each { |signal, handler| Signal.trap(signal, handler || "DEFAULT") }
    end

    # Call the block until it answers; back off on an unreachable gateway, 503 or 429.
    # Returns nil once stopping.
    def retrying
      backoff = 0.5
      until @stopping
        begin
          return yield
        rescue ServiceUnavailable, RateLimited => e
          wait = e.retry_after || backoff
          @logger.warn("#{e.message}; trying again in #{(wait * 1000).round} ms")
          pause(wait)
          backoff = [backoff * 2, 10.0].min
        end
      end
      nil
    end

    # Sleep up to `seconds`, woken early by stop.
    def pause(seconds)
      @mutex.synchronize { @changed.wait(@mutex, seconds) unless @stopping }
    end

    def loop_claims
      until @stopping
        free = @mutex.synchronize do
          @changed.wait(@mutex) while @running.size >= @concurrency && !@stopping
          @concurrency - @running.size
        end
        break if @stopping

        wait_ms = [@wait_ms, @max_wait_ms].min
        asked = monotonic
        jobs = retrying do
          @client.claim(queues: @queues, job_types: @handlers.keys, limit: free, wait_ms: wait_ms,
                        worker: @name, lease_ms: @lease_ms)
        end
        # A claim answered while stopping still runs its jobs: they are held under our lease.
        (jobs || []).each { |job| start(job) }
        if jobs&.empty? && wait_ms.positive? && monotonic - asked < wait_ms / 2000.0
          # No jobs long before the wait ended: a WSGI server at its cap of waiting
          # claims answered at once (Retry-After: 1 s); claim again after it.
          pause(1.0)
        end
      end
    end

    def start(job)
      @mutex.synchronize do
        @stats[:claimed] += 1
        @running[job["jid"]] = Thread.new(job) do |claimed|
          execute(claimed)
        ensure
          @mutex.synchronize do
            @running.delete(claimed["jid"])
            @changed.broadcast
          end
        end
      end
    end

    def drain
      @mutex.synchronize { @changed.wait(@mutex) until @running.empty? }
    end

    def report_stop
      # Gone from the console and `jobqueue status` at once, not three heartbeats later.
      @client.stop_worker(@name)
    rescue Error => e
      @logger.warn("could not report the stop of #{@name}: #{e.message}")
    end

    def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    # Run one claimed job and report it; never raises.
    def execute(job)
      ctx = Context.new(job)
      outcome = run_handler(job, ctx)
      return dropped(job) if ctx.lease_lost?

      report(job, ctx, outcome)
    rescue LeaseLost
      dropped(job)
    rescue StandardError => e
      @logger.error("report of #{job["jid"]} failed: #{e.class}: #{e.message}")
    end

    # [:ok, result] or [:error, exception], with heartbeats while the handler runs.
    def run_handler(job, ctx)
      handler = @handlers[job["job_type"]]
      deadline = monotonic + job.fetch("timeout_ms", 3_600_000) / 1000.0
      thread = Thread.new do
        Thread.current.report_on_exception = false
        raise NameError, "no handler for job type #{job["job_type"]}" if handler.nil?

        invoke(handler, job["payload"], ctx)
      end
      until thread.join([@heartbeat_ms / 1000.0, deadline - monotonic].min.clamp(0.0, nil))
        if monotonic >= deadline
          thread.raise(JobTimeout, "timed out after #{job["timeout_ms"]} ms")
          thread.join
          break
        end
        heartbeat(job, ctx)
      end
      [:ok, thread.value]
    rescue Exception => e # rubocop:disable Lint/RescueException -- the handler boundary: any error fails the attempt
      [:error, e]
    end

    def invoke(handler, payload, ctx)
      if handler.is_a?(Class)
        handler.new.perform(payload, ctx)
      elsif handler.respond_to?(:perform)
        handler.perform(payload, ctx)
      else
        handler.call(payload, ctx)
      end
    end

    def heartbeat(job, ctx)
      return if ctx.lease_lost?

      cancel = @client.heartbeat(job["jid"], job["lease_token"], lease_ms: @lease_ms)
      ctx.cancel_requested! if cancel
    rescue LeaseLost
      ctx.lease_lost!
    rescue Error => e
      @logger.warn("heartbeat of #{job["jid"]} failed: #{e.message}")
    end

    def report(job, ctx, outcome)
      kind, value = outcome
      if kind == :ok
        begin
          reporting { @client.complete(job["jid"], job["lease_token"], value) }
          count(:done)
          return
        rescue JSON::GeneratorError => e
          value = e # the result is not JSON: fail the attempt with why
        end
      end
      report_failure(job, ctx, value)
    end

    def report_failure(job, ctx, error)
      cancelled = ctx.cancel_requested?
      again = !(error.respond_to?(:retry?) && error.retry? == false)
      exception_class = error.is_a?(JobTimeout) ? "TimeoutError" : error.class.name.to_s
      message = error.message.to_s
      message = exception_class if message.empty?
      status = reporting do
        @client.fail(job["jid"], job["lease_token"], error: message[0, MAX_ERROR],
                                                     exception_class: exception_class[0, MAX_CLASS],
                                                     retry: again, cancelled: cancelled)
      end
      count(cancelled ? :cancelled : :failed)
      @logger.warn("job #{job["jid"]} (#{job["job_type"]}) failed: #{exception_class}; stored #{status}")
    end

    # A report, retried while the gateway is unreachable (the lease bounds this).
    def reporting
      backoff = 0.25
      tries = 0
      begin
        tries += 1
        yield
      rescue ServiceUnavailable, RateLimited => e
        raise if tries >= 8

        sleep(e.retry_after || backoff)
        backoff = [backoff * 2, 5.0].min
        retry
      end
    end

    def count(key)
      @mutex.synchronize { @stats[key] += 1 }
    end

    def dropped(job)
      count(:lease_lost)
      @logger.warn("job #{job["jid"]} (#{job["job_type"]}): lease lost, outcome dropped")
    end
  end
end
