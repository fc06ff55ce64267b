require "json"
require "../src/jobqueue_client"

module Conformance
  # A scenario that did not hold (or could not be read): its reason is the report's.
  class ScenarioError < Exception
  end

  # The conformance suite's language-neutral verbs, each made through the Crystal
  # client's own call: arguments in the gateway's names (snake_case), answers as the
  # gateway's JSON.
  module Verbs
    ENQUEUE_OPTIONS = %w(queue priority delay run_at expires_ms timeout_ms max_retry unique_key unique_mode
      unique_ttl_ms id limit_key batch after on_upstream_failure)
    ID_VALUE = %w(value job_type at delay)

    def self.call(client : JobQueue::Client, verb : String, args : Hash(String, JSON::Any)) : JSON::Any
      case verb
      when "enqueue"
        known(args, ENQUEUE_OPTIONS, "job_type", "payload", "options")
        client.enqueue(job_spec(args)).raw
      when "enqueue_batch"
        known(args, [] of String, "jobs")
        jobs = array(required(args, "jobs")).map do |item|
          job = object(item)
          known(job, ENQUEUE_OPTIONS, "job_type", "payload", "options")
          job_spec(job)
        end
        obj("results", JSON::Any.new(client.enqueue_batch(jobs).map(&.raw)))
      when "get_job"
        known(args, [] of String, "jid")
        client.get_job(text(args, "jid")).raw
      when "cancel"
        known(args, [] of String, "jid")
        answer = client.cancel(text(args, "jid"))
        JSON.parse(answer.to_json)
      when "retry"
        known(args, [] of String, "jid")
        obj("retried", JSON::Any.new(client.retry(text(args, "jid"))))
      when "ids.add", "ids.set", "ids.update"
        known(args, ID_VALUE, "queue", "id")
        queue, id = text(args, "queue"), text(args, "id")
        job_type, at, delay = opt_text(args, "job_type"), opt_text(args, "at"), delay(args)
        ids = client.ids
        answer = if args.has_key?("value")
                   value = args["value"]
                   case verb
                   when "ids.add" then ids.add(queue, id, value, job_type: job_type, at: at, delay: delay)
                   when "ids.set" then ids.set(queue, id, value, job_type: job_type, at: at, delay: delay)
                   else                ids.update(queue, id, value, job_type: job_type, at: at, delay: delay)
                   end
                 else
                   case verb
                   when "ids.add" then ids.add(queue, id, job_type: job_type, at: at, delay: delay)
                   when "ids.set" then ids.set(queue, id, job_type: job_type, at: at, delay: delay)
                   else                ids.update(queue, id, job_type: job_type, at: at, delay: delay)
                   end
                 end
        obj({"ids.add" => "added", "ids.set" => "set", "ids.update" => "updated"}[verb], JSON::Any.new(answer))
      when "ids.cancel"
        known(args, [] of String, "queue", "id")
        obj("cancelled", JSON::Any.new(client.ids.cancel(text(args, "queue"), text(args, "id"))))
      when "ids.get"
        known(args, [] of String, "queue", "id")
        client.ids.get(text(args, "queue"), text(args, "id")).try(&.raw) || JSON::Any.new(nil)
      when "ids.list"
        known(args, %w(prefix state limit cursor), "queue")
        client.ids.list(text(args, "queue"), prefix: opt_text(args, "prefix"), state: opt_text(args, "state"),
          limit: int(args, "limit"), cursor: opt_text(args, "cursor")).raw
      when "register"
        known(args, %w(name host pid languages job_types concurrency version), "queues")
        client.register(strings(required(args, "queues")), name: opt_text(args, "name"), host: opt_text(args, "host"),
          pid: int(args, "pid"), languages: opt_strings(args, "languages"), job_types: opt_strings(args, "job_types"),
          concurrency: int(args, "concurrency"), version: opt_text(args, "version")).raw
      when "claim"
        known(args, %w(job_types limit wait_ms worker lease_ms), "queues")
        jobs = client.claim(strings(required(args, "queues")), job_types: opt_strings(args, "job_types"),
          limit: int(args, "limit"), wait_ms: int(args, "wait_ms"), worker: opt_text(args, "worker"),
          lease_ms: int(args, "lease_ms"))
        obj("jobs", JSON::Any.new(jobs.map(&.raw)))
      when "heartbeat"
        known(args, %w(lease_ms), "jid", "lease_token")
        obj("cancel_requested", JSON::Any.new(client.heartbeat(text(args, "jid"), text(args, "lease_token"), int(args, "lease_ms"))))
      when "complete"
        known(args, %w(result), "jid", "lease_token")
        result = args["result"]? || JSON::Any.new(nil)
        obj("status", JSON::Any.new(client.complete(text(args, "jid"), text(args, "lease_token"), result)))
      when "fail"
        known(args, %w(error exception_class retry cancelled), "jid", "lease_token")
        status = client.fail(text(args, "jid"), text(args, "lease_token"), error: opt_text(args, "error"),
          exception_class: opt_text(args, "exception_class"), retry: bool(args, "retry"),
          cancelled: bool(args, "cancelled"))
        obj("status", JSON::Any.new(status))
      when "stop_worker"
        known(args, [] of String, "name")
        name = text(args, "name")
        JSON::Any.new({"stopped" => JSON::Any.new(client.stop_worker(name)), "name" => JSON::Any.new(name)})
      else
        raise ScenarioError.new("unknown verb #{verb}")
      end
    end

    private def self.job_spec(args : Hash(String, JSON::Any)) : JobQueue::JobSpec
      source = args["options"]?.try(&.as_h?) || args
      JobQueue::JobSpec.new(text(args, "job_type"), args["payload"]?,
        queue: opt_text(source, "queue"), priority: int(source, "priority"), delay: delay(source),
        run_at: opt_text(source, "run_at"), expires_ms: int(source, "expires_ms"),
        timeout_ms: int(source, "timeout_ms"), max_retry: int(source, "max_retry"),
        unique_key: opt_text(source, "unique_key"), unique_mode: opt_text(source, "unique_mode"),
        unique_ttl_ms: int(source, "unique_ttl_ms"), id: opt_text(source, "id"),
        limit_key: opt_text(source, "limit_key"), batch: int(source, "batch"),
        after: opt_strings(source, "after"), on_upstream_failure: opt_text(source, "on_upstream_failure"))
    end

    private def self.delay(args : Hash(String, JSON::Any)) : JobQueue::Delay?
      value = args["delay"]?
      return nil if value.nil?
      value.as_s? || value.as_i64? || value.as_f?
    end

    # Refuse an argument the verb does not take: a misspelt scenario fails loudly.
    private def self.known(args : Hash(String, JSON::Any), optional : Array(String), *required : String) : Nil
      args.each_key do |name|
        next if optional.includes?(name) || required.includes?(name)
        raise ScenarioError.new("unknown argument #{name}")
      end
    end

    private def self.required(args : Hash(String, JSON::Any), name : String) : JSON::Any
      args[name]? || raise ScenarioError.new("missing argument #{name}")
    end

    private def self.text(args : Hash(String, JSON::Any), name : String) : String
      value = required(args, name)
      value.as_s? || value.to_json
    end

    private def self.opt_text(args : Hash(String, JSON::Any), name : String) : String?
      value = args[name]?
      return nil if value.nil? || value.raw.nil?
      value.as_s? || value.to_json
    end

    private def self.int(args : Hash(String, JSON::Any), name : String) : Int64?
      args[name]?.try(&.as_i64?)
    end

    private def self.bool(args : Hash(String, JSON::Any), name : String) : Bool?
      args[name]?.try(&.as_bool?)
    end

    private def self.array(value : JSON::Any) : Array(JSON::Any)
      value.as_a? || raise ScenarioError.new("not an array: #{value.to_json}")
    end

    private def self.object(value : JSON::Any) : Hash(String, JSON::Any)
      value.as_h? || raise ScenarioError.new("not an object: #{value.to_json}")
    end

    private def self.strings(value : JSON::Any) : Array(String)
      array(value).map { |item| item.as_s? || item.to_json }
    end

    private def self.opt_strings(args : Hash(String, JSON::Any), name : String) : Array(String)?
      args[name]?.try { |value| strings(value) }
    end

    private def self.obj(name : String, value : JSON::Any) : JSON::Any
      JSON::Any.new({name => value})
    end
  end
end
