require "json"

module JobQueue
  # A job class in the JoobQ style: include JobQueue::Job, name the job type, and
  # define `perform(payload, ctx)`; its return value (anything with `to_json`) is the
  # job's result. A worker makes one instance per run (`Worker#register`).
  #
  # ```
  # struct Greet
  #   include JobQueue::Job
  #   job_type "hello.greet"
  #
  #   def perform(payload : JSON::Any, ctx : JobQueue::Context)
  #     ctx.check_cancel! # raises JobQueue::Cancelled once a cancel was requested
  #     {greeting: "Hello, #{payload["name"]}"}
  #   end
  # end
  # ```
  #
  # Raise `JobQueue::PermanentFailure` to dead-letter the job at once; any other
  # exception is retried with backoff.
  module Job
    # Declare the job type the class runs.
    macro job_type(name)
      def self.job_type : String
        {{ name }}
      end
    end
  end

  # Raise it to dead-letter the job at once (the fail report's retry is false).
  class PermanentFailure < Exception
  end

  # Raised by `Context#check_cancel!` once a heartbeat answered cancel_requested; the
  # worker reports the job cancelled.
  class Cancelled < Exception
  end

  # What a handler gets beside the payload: the claimed job and the flags its
  # heartbeats set.
  class Context
    # The claimed job as the gateway sent it.
    getter job : ClaimedJob

    def initialize(@job : ClaimedJob)
      @cancel_requested = job.cancel_requested?
      @lease_lost = false
    end

    delegate jid, queue, job_type, id, attempt, max_retry, timeout_ms, to: @job

    # True once a heartbeat answered cancel_requested: stop and raise.
    def cancel_requested? : Bool
      @cancel_requested
    end

    # True once a heartbeat answered 409 lease_lost: the outcome will be dropped.
    def lease_lost? : Bool
      @lease_lost
    end

    # Raise `Cancelled` if a cancel was requested (call it between steps).
    def check_cancel! : Nil
      raise Cancelled.new("cancel requested") if @cancel_requested
    end

    protected def cancel_requested! : Nil
      @cancel_requested = true
    end

    protected def lease_lost! : Nil
      @lease_lost = true
    end
  end
end
