require "json"

module JobQueue
  # The gateway's answers, each a view over its JSON (`raw`) with typed getters for
  # the members a caller reads most; `raw` has them all (docs/gateway.md, "Routes").
  module Answer
    # The answer as the gateway sent it.
    getter raw : JSON::Any

    def initialize(@raw : JSON::Any)
    end

    def to_json(json : JSON::Builder) : Nil
      raw.to_json(json)
    end

    private def str?(name : String) : String?
      raw[name]?.try(&.as_s?)
    end

    private def int(name : String) : Int64
      raw[name]?.try(&.as_i64?) || 0_i64
    end

    private def bool(name : String) : Bool
      raw[name]?.try(&.as_bool?) || false
    end
  end

  # `POST /sdk/jobs`: what became of an enqueue.
  struct EnqueueResult
    include Answer

    # "enqueued" or "deduplicated".
    def status : String
      str?("status") || ""
    end

    def jid : String
      str?("jid") || ""
    end
  end

  # `GET /sdk/jobs/{jid}`: a stored job (JobOut).
  struct StoredJob
    include Answer

    def jid : String
      str?("jid") || ""
    end

    def queue : String
      str?("queue") || ""
    end

    def job_type : String
      str?("job_type") || ""
    end

    # The stored status (init, processing, done, retry, ...).
    def status : String
      str?("status") || ""
    end

    # The state word: scheduled, waiting, running, failed, done, cancelled, blocked.
    def state : String
      str?("state") || ""
    end

    def attempt : Int64
      int("attempt")
    end

    def payload : JSON::Any
      raw["payload"]? || JSON::Any.new(nil)
    end

    def result : JSON::Any
      raw["result"]? || JSON::Any.new(nil)
    end

    # {attempt, message, exception_class, at} of the last failure, or nil.
    def last_error : JSON::Any?
      raw["last_error"]?.try { |e| e.raw.nil? ? nil : e }
    end

    def cancel_requested? : Bool
      bool("cancel_requested")
    end
  end

  # A job as the id verbs show it (IdJobOut).
  struct IdJob
    include Answer

    def id : String?
      str?("id")
    end

    def value : JSON::Any
      raw["value"]? || JSON::Any.new(nil)
    end

    def state : String
      str?("state") || ""
    end

    def jid : String
      str?("jid") || ""
    end
  end

  # A page of `GET /sdk/queues/{queue}/jobs`.
  struct Page
    include Answer

    def jobs : Array(IdJob)
      raw["jobs"].as_a.map { |job| IdJob.new(job) }
    end

    # The cursor of the next page, or nil on the last.
    def next : String?
      str?("next")
    end
  end

  # `POST /sdk/worker/register`.
  struct Registration
    include Answer

    def name : String
      str?("name") || ""
    end

    def lease_ms : Int64
      int("lease_ms")
    end

    def heartbeat_ms : Int64
      int("heartbeat_ms")
    end

    def max_wait_ms : Int64
      int("max_wait_ms")
    end
  end

  # One job of `POST /sdk/worker/claim`, held under `lease_token`.
  struct ClaimedJob
    include Answer

    def jid : String
      str?("jid") || ""
    end

    def queue : String
      str?("queue") || ""
    end

    def job_type : String
      str?("job_type") || ""
    end

    def id : String?
      str?("id")
    end

    def payload : JSON::Any
      raw["payload"]? || JSON::Any.new(nil)
    end

    # 1 on the first run.
    def attempt : Int64
      int("attempt")
    end

    def max_retry : Int64
      int("max_retry")
    end

    # The job's timeout, ms.
    def timeout_ms : Int64
      int("timeout_ms")
    end

    def lease_token : String
      str?("lease_token") || ""
    end

    def cancel_requested? : Bool
      bool("cancel_requested")
    end
  end
end
