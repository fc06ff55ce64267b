# frozen_string_literal: true

# The job class of tests/client/test_worker_behaviour.py, for bin/jobqueue-worker
# --handlers: one job type whose payload's "mode" picks what the handler does.
class BehaviourJob
  include JobQueue::Job
  job_type "behave.run"

  def perform(payload, ctx)
    case payload["mode"]
    when "slow" # seconds, checking for a cancel request every 0.1 s
      (payload.fetch("seconds") * 10).times do
        ctx.check_cancel!
        sleep 0.1
      end
      { "slept" => payload["seconds"] }
    when "fail" then raise ArgumentError, "bad thing"
    when "permanent" then raise JobQueue::PermanentFailure, "never again"
    when "crash" then raise NoMemoryError, "out of memory"
    when "empty" then {}
    else raise ArgumentError, "unknown mode #{payload["mode"].inspect}"
    end
  end
end
