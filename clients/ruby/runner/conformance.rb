# frozen_string_literal: true

# The Ruby client's conformance runner (clients/conformance/README.md).
#
#   ruby runner/conformance.rb run <scenarios_dir>  # every scenario JSON through the client
#   ruby runner/conformance.rb worker               # a Worker on $JOBQUEUE_QUEUE until SIGTERM
#
# run prints "ok NAME" or "not ok NAME: reason" per scenario and "N passed, N failed"
# last; exit status 0 iff all passed. worker runs the client's Worker on
# JOBQUEUE_QUEUE at JOBQUEUE_CONCURRENCY (default 4), handling conformance.echo,
# conformance.spawn (an enqueue from inside a handler) and conformance.sleep, until
# SIGTERM (it drains, then exits 0). Environment: JOBQUEUE_URL (the gateway,
# http://127.0.0.1:PORT/sdk) and JOBQUEUE_TOKENS (a JSON file mapping a token role to
# its token). A setup problem exits 2.
require "json"

require_relative "../lib/jobqueue_client"
require_relative "scenario"

module Conformance
  module_function

  def env(name)
    value = ENV.fetch(name, "")
    raise ScenarioError, "#{name} is not set" if value.strip.empty?

    value
  end

  def tokens
    path = env("JOBQUEUE_TOKENS")
    data = begin
      JSON.parse(File.read(path))
    rescue SystemCallError, JSON::ParserError => e
      raise ScenarioError, "cannot read JOBQUEUE_TOKENS #{path}: #{e.message}"
    end
    raise ScenarioError, "JOBQUEUE_TOKENS #{path} is not an object" unless data.is_a?(Hash)

    data.select { |_, token| token.is_a?(String) }
  end

  def run(dir)
    raise ScenarioError, "no directory #{dir}" unless File.directory?(dir)

    files = Dir.glob(File.join(dir, "*.json")).sort
    raise ScenarioError, "no scenario JSON in #{dir}" if files.empty?

    url = env("JOBQUEUE_URL")
    roles = tokens
    passed = failed = 0
    files.each do |file|
      name = File.basename(file, ".json")
      begin
        scenario = JSON.parse(File.read(file))
        raise ScenarioError, "the scenario is not a JSON object" unless scenario.is_a?(Hash)

        name = scenario["name"] if scenario["name"].is_a?(String)
        Scenario.new(url, roles).run(scenario)
        puts "ok #{name}"
        passed += 1
      rescue ScenarioError => e
        puts "not ok #{name}: #{one_line(e.message)}"
        failed += 1
      rescue StandardError => e
        puts "not ok #{name}: #{e.class}: #{one_line(e.message)}"
        failed += 1
      end
      $stdout.flush
    end
    puts "#{passed} passed, #{failed} failed"
    failed.zero? ? 0 : 1
  end

  def one_line(text) = text.to_s.tr("\r\n", "  ")

  # The worker of the mixed drain: echoes each payload back with the language.
  def worker
    url = env("JOBQUEUE_URL")
    token = Scenario.worker_token(tokens)
    queue = env("JOBQUEUE_QUEUE")
    text = ENV.fetch("JOBQUEUE_CONCURRENCY", "").strip
    concurrency = text.empty? ? 4 : Integer(text, exception: false)
    raise ScenarioError, "JOBQUEUE_CONCURRENCY is not a number: #{text}" if concurrency.nil?

    $stderr.sync = true
    client = JobQueue::Client.new(url, token)
    echo = ->(payload, _ctx) { { "lang" => "ruby", "payload" => payload } }
    # An enqueue from inside a handler, with the worker's own client.
    spawn = lambda do |payload, _ctx|
      answer = client.enqueue(payload["job_type"], payload["payload"], queue: payload["queue"])
      { "lang" => "ruby", "jid" => answer["jid"] }
    end
    # A job that runs a while (the harness's SIGTERM drain): payload.ms milliseconds.
    slow = lambda do |payload, _ctx|
      ms = Integer(payload["ms"])
      sleep(ms / 1000.0)
      { "lang" => "ruby", "slept" => ms }
    end
    handlers = { "conformance.echo" => echo, "conformance.spawn" => spawn, "conformance.sleep" => slow }
    stats = JobQueue::Worker.new(client, handlers, queues: [queue], concurrency: concurrency).run
    warn "conformance (ruby): worker stopped: #{stats}"
    0
  end

  def main(args)
    if args.length == 2 && args[0] == "run"
      run(args[1])
    elsif args == ["worker"]
      worker
    else
      warn "usage: conformance run <scenarios_dir> | worker"
      2
    end
  rescue ScenarioError => e
    warn "conformance (ruby): #{e.message}"
    2
  end
end

exit Conformance.main(ARGV) if $PROGRAM_NAME == __FILE__
