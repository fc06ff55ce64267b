# The worker of tests/client/test_worker_behaviour.py: one job type whose payload's
# "mode" picks what the handler does.
#
#   behaviour-worker <queue>   # JQ_URL, JQ_TOKEN; until SIGTERM
require "../src/jobqueue_client"

struct BehaviourJob
  include JobQueue::Job
  job_type "behave.run"

  def perform(payload : JSON::Any, ctx : JobQueue::Context)
    case payload["mode"].as_s
    when "slow" # seconds, checking for a cancel request every 0.1 s
      (payload["seconds"].as_i * 10).times do
        ctx.check_cancel!
        sleep 0.1
      end
      {slept: payload["seconds"]}
    when "fail"      then raise ArgumentError.new("bad thing")
    when "permanent" then raise JobQueue::PermanentFailure.new("never again")
    when "crash"     then raise IndexError.new("out of range")
    when "empty"     then {} of String => String
    else                  raise ArgumentError.new("unknown mode #{payload["mode"]}")
    end
  end
end

client = JobQueue::Client.new(ENV["JQ_URL"], ENV["JQ_TOKEN"])
JobQueue::Worker.new(client, [ARGV[0]], concurrency: 8).register(BehaviourJob).run
