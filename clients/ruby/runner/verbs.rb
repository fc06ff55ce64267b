# frozen_string_literal: true

require "json"

module Conformance
  # A scenario that did not hold (or could not be read): its reason is the report's.
  class ScenarioError < StandardError; end

  # The conformance suite's language-neutral verbs, each made through the Ruby
  # client's own call: arguments in the gateway's names (snake_case), answers as the
  # gateway's JSON.
  module Verbs
    ENQUEUE_OPTIONS = %w[queue priority delay run_at expires_ms timeout_ms max_retry unique_key
                         unique_mode unique_ttl_ms id limit_key batch after on_upstream_failure].freeze
    ID_VALUE = %w[value job_type at delay].freeze

    module_function

    def call(client, verb, args)
      case verb
      when "enqueue"
        known(args, ENQUEUE_OPTIONS, "job_type", "payload", "options")
        client.enqueue(text(args, "job_type"), args["payload"], **enqueue_options(args))
      when "enqueue_batch"
        known(args, [], "jobs")
        jobs = array(required(args, "jobs")).map do |item|
          job = object(item)
          known(job, ENQUEUE_OPTIONS, "job_type", "payload", "options")
          { job_type: text(job, "job_type"), payload: job["payload"], **enqueue_options(job) }
        end
        { "results" => client.enqueue_batch(jobs) }
      when "get_job"
        known(args, [], "jid")
        client.get_job(text(args, "jid"))
      when "cancel"
        known(args, [], "jid")
        client.cancel(text(args, "jid"))
      when "retry"
        known(args, [], "jid")
        { "retried" => client.retry(text(args, "jid")) }
      when "ids.add", "ids.set", "ids.update"
        known(args, ID_VALUE, "queue", "id")
        word = verb.delete_prefix("ids.")
        answer = client.ids.public_send(word, text(args, "queue"), text(args, "id"), **id_value(args))
        { { "add" => "added", "set" => "set", "update" => "updated" }.fetch(word) => answer }
      when "ids.cancel"
        known(args, [], "queue", "id")
        { "cancelled" => client.ids.cancel(text(args, "queue"), text(args, "id")) }
      when "ids.get"
        known(args, [], "queue", "id")
        client.ids.get(text(args, "queue"), text(args, "id"))
      when "ids.list"
        known(args, %w[prefix state limit cursor], "queue")
        client.ids.list(text(args, "queue"), prefix: args["prefix"], state: args["state"],
                                             limit: args["limit"], cursor: args["cursor"])
      when "register"
        known(args, %w[name host pid languages job_types concurrency version], "queues")
        client.register(name: args["name"], host: args["host"], pid: args["pid"], languages: args["languages"],
                        queues: strings(required(args, "queues")), job_types: args["job_types"],
                        concurrency: args["concurrency"], version: args["version"])
      when "claim"
        known(args, %w[job_types limit wait_ms worker lease_ms], "queues")
        { "jobs" => client.claim(queues: strings(required(args, "queues")), job_types: args["job_types"],
                                 limit: args["limit"], wait_ms: args["wait_ms"], worker: args["worker"],
                                 lease_ms: args["lease_ms"]) }
      when "heartbeat"
        known(args, %w[lease_ms], "jid", "lease_token")
        { "cancel_requested" => client.heartbeat(text(args, "jid"), text(args, "lease_token"),
                                                 lease_ms: args["lease_ms"]) }
      when "complete"
        known(args, %w[result], "jid", "lease_token")
        { "status" => client.complete(text(args, "jid"), text(args, "lease_token"), args["result"]) }
      when "fail"
        known(args, %w[error exception_class retry cancelled], "jid", "lease_token")
        { "status" => client.fail(text(args, "jid"), text(args, "lease_token"), error: args["error"],
                                                                              exception_class: args["exception_class"],
                                                                              retry: args["retry"],
                                                                              cancelled: args["cancelled"]) }
      when "stop_worker"
        known(args, [], "name")
        { "stopped" => client.stop_worker(text(args, "name")), "name" => text(args, "name") }
      else
        raise ScenarioError, "unknown verb #{verb}"
      end
    end

    def enqueue_options(args)
      source = args["options"].is_a?(Hash) ? args["options"] : args
      ENQUEUE_OPTIONS.filter_map { |name| [name.to_sym, source[name]] if source.key?(name) }.to_h
    end

    def id_value(args)
      options = { job_type: args["job_type"], at: args["at"], delay: args["delay"] }
      options[:value] = args["value"] if args.key?("value")
      options
    end

    # Refuse an argument the verb does not take: a misspelt scenario fails loudly.
    def known(args, optional, *required)
      unknown = args.keys - optional - required
      raise ScenarioError, "unknown argument #{unknown.first}" unless unknown.empty?
    end

    def required(args, name)
      raise ScenarioError, "missing argument #{name}" unless args.key?(name)

      args[name]
    end

    def text(args, name)
      value = required(args, name)
      value.nil? || value.is_a?(String) ? value : JSON.generate(value)
    end

    def array(value)
      raise ScenarioError, "not an array: #{JSON.generate(value)}" unless value.is_a?(Array)

      value
    end

    def object(value)
      raise ScenarioError, "not an object: #{JSON.generate(value)}" unless value.is_a?(Hash)

      value
    end

    def strings(value) = array(value).map { |item| item.is_a?(String) ? item : JSON.generate(item) }
  end
end
