# The Crystal client's conformance runner (clients/conformance/README.md).
#
#   build/jobqueue-conformance run <scenarios_dir>  # every scenario JSON through the client
#   build/jobqueue-conformance worker               # a Worker on $JOBQUEUE_QUEUE until SIGTERM
#
# run prints "ok NAME" or "not ok NAME: reason" per scenario and "N passed, N failed"
# last; exit status 0 iff all passed. worker runs the client's Worker on
# JOBQUEUE_QUEUE at JOBQUEUE_CONCURRENCY (default 4), handling conformance.echo,
# conformance.spawn (an enqueue from inside a handler) and conformance.sleep, until SIGTERM (it drains, then
# exits 0). Environment: JOBQUEUE_URL (the gateway, http://127.0.0.1:PORT/sdk) and
# JOBQUEUE_TOKENS (a JSON file mapping a token role to its token). A setup problem exits 2.
require "json"
require "../src/jobqueue_client"
require "./scenario"

module Conformance
  def self.env(name : String) : String
    value = ENV[name]?
    raise ScenarioError.new("#{name} is not set") if value.nil? || value.strip.empty?
    value
  end

  def self.tokens : Hash(String, String)
    path = env("JOBQUEUE_TOKENS")
    data = begin
      JSON.parse(File.read(path))
    rescue e : IO::Error | File::Error | JSON::ParseException
      raise ScenarioError.new("cannot read JOBQUEUE_TOKENS #{path}: #{e.message}")
    end
    hash = data.as_h? || raise ScenarioError.new("JOBQUEUE_TOKENS #{path} is not an object")
    hash.compact_map { |role, token| token.as_s?.try { |text| {role, text} } }.to_h
  end

  def self.one_line(text : String?) : String
    (text || "").gsub(/[\r\n]/, " ")
  end

  def self.run(dir : String) : Int32
    raise ScenarioError.new("no directory #{dir}") unless Dir.exists?(dir)
    files = Dir.glob(File.join(dir, "*.json")).sort
    raise ScenarioError.new("no scenario JSON in #{dir}") if files.empty?
    url = env("JOBQUEUE_URL")
    roles = tokens
    passed = failed = 0
    files.each do |file|
      name = File.basename(file, ".json")
      begin
        scenario = JSON.parse(File.read(file))
        raise ScenarioError.new("the scenario is not a JSON object") unless scenario.as_h?
        scenario["name"]?.try(&.as_s?).try { |title| name = title }
        Scenario.new(url, roles).run(scenario)
        puts "ok #{name}"
        passed += 1
      rescue e : ScenarioError
        puts "not ok #{name}: #{one_line(e.message)}"
        failed += 1
      rescue e
        puts "not ok #{name}: #{e.class}: #{one_line(e.message)}"
        failed += 1
      end
      STDOUT.flush
    end
    puts "#{passed} passed, #{failed} failed"
    failed == 0 ? 0 : 1
  end

  # The worker of the mixed drain: echoes each payload back with the language.
  def self.worker : Int32
    url = env("JOBQUEUE_URL")
    token = Scenario.worker_token(tokens)
    queue = env("JOBQUEUE_QUEUE")
    text = (ENV["JOBQUEUE_CONCURRENCY"]? || "").strip
    concurrency = text.empty? ? 4 : (text.to_i? || raise ScenarioError.new("JOBQUEUE_CONCURRENCY is not a number: #{text}"))
    client = JobQueue::Client.new(url, token)
    worker = JobQueue::Worker.new(client, [queue], concurrency: concurrency)
    worker.handle("conformance.echo") { |payload, _ctx| {lang: "crystal", payload: payload} }
    # An enqueue from inside a handler, with the worker's own client.
    worker.handle("conformance.spawn") do |payload, _ctx|
      answer = client.enqueue(payload["job_type"].as_s, payload["payload"]?, queue: payload["queue"]?.try(&.as_s?))
      {lang: "crystal", jid: answer.jid}
    end
    # A job that runs a while (the harness's SIGTERM drain): payload.ms milliseconds.
    worker.handle("conformance.sleep") do |payload, _ctx|
      ms = payload["ms"].as_i
      sleep ms.milliseconds
      {lang: "crystal", slept: ms}
    end
    stats = worker.run
    STDERR.puts "conformance (crystal): worker stopped: #{stats}"
    0
  end

  def self.main(args : Array(String)) : Int32
    if args.size == 2 && args[0] == "run"
      run(args[1])
    elsif args == ["worker"]
      worker
    else
      STDERR.puts "usage: conformance run <scenarios_dir> | worker"
      2
    end
  rescue e : ScenarioError
    STDERR.puts "conformance (crystal): #{e.message}"
    2
  end
end

exit Conformance.main(ARGV)
