# frozen_string_literal: true

module JobQueue
  # A job class in the JoobQ style: include JobQueue::Job, name the job type, and
  # define perform(payload, ctx); its return value (any JSON value) is the result.
  # A worker makes one instance per run.
  #
  #   class Greet
  #     include JobQueue::Job
  #     job_type "hello.greet"
  #
  #     def perform(payload, ctx)
  #       ctx.check_cancel!   # raises JobQueue::Cancelled once a cancel was requested
  #       { "greeting" => "Hello, #{payload["name"]}" }
  #     end
  #   end
  #
  # Raise JobQueue::PermanentFailure (or any error whose retry? is false) to
  # dead-letter the job at once; any other error is retried with backoff.
  module Job
    @registry = {}

    class << self
      # Job type (String) => job class, for every class that named its job type.
      def registry = @registry.dup

      def register(name, klass)
        @registry[name] = klass
      end

      def included(base)
        base.extend(ClassMethods)
      end
    end

    # The class-level declaration of a job class.
    module ClassMethods
      # With a name (String): declare the class's job type and register it (see
      # JobQueue::Job.registry); without one: the declared job type, or nil.
      def job_type(name = nil)
        return @job_type if name.nil?

        @job_type = name.to_s
        JobQueue::Job.register(@job_type, self)
        @job_type
      end
    end
  end

  # Raise it to dead-letter the job at once (the fail report's retry is false).
  class PermanentFailure < StandardError
    def retry? = false
  end

  # Raised by Context#check_cancel! once a heartbeat answered cancel_requested; the
  # worker reports the job cancelled.
  class Cancelled < StandardError; end

  # Raised in a handler still running at its job's timeout_ms; the attempt fails
  # (exception_class "TimeoutError").
  class JobTimeout < StandardError; end

  # What a handler gets beside the payload: the claimed job's fields and the flags
  # its heartbeats set.
  class Context
    # The claimed job as the gateway sent it (Hash with String keys).
    attr_reader :job

    def initialize(job)
      @job = job
      @cancel_requested = job["cancel_requested"] == true
      @lease_lost = false
    end

    def jid = job["jid"]
    def queue = job["queue"]
    def job_type = job["job_type"]
    # The id the job holds (docs/design.md#ids), or nil.
    def id = job["id"]
    # 1 on the first run.
    def attempt = job["attempt"]
    def max_retry = job["max_retry"]
    # The job's timeout, ms: past it the attempt fails.
    def timeout_ms = job["timeout_ms"]
    # True once a heartbeat answered cancel_requested: stop and raise.
    def cancel_requested? = @cancel_requested
    # True once a heartbeat answered 409 lease_lost: the outcome will be dropped.
    def lease_lost? = @lease_lost

    # Raise JobQueue::Cancelled if a cancel was requested (call it between steps).
    def check_cancel!
      raise Cancelled, "cancel requested" if @cancel_requested
    end

    # :nodoc: set by the worker's heartbeat.
    def cancel_requested!
      @cancel_requested = true
    end

    # :nodoc: set by the worker's heartbeat.
    def lease_lost!
      @lease_lost = true
    end
  end
end
