require "json"
require "./verbs"

module Conformance
  # One scenario: its steps, run in order through the client, with the values they saved.
  # A scenario is {"name", "steps": [step, ...]}; a step is
  # {"verb" (or "call", "op"), "args" ("with", "params", "input"): the gateway's field names,
  #  "token" ("as", "role"): a role of JOBQUEUE_TOKENS (default "all"),
  #  "expect" ("expected", "result"): a subset of the answer's JSON,
  #  "error" ("raises", "expect_error"): a class (DuplicateJob), a code (duplicate_job), or a
  #    subset of the error body plus "status", "class", "code",
  #  "save": a name for the answer (or the error), or {name: "path.in.answer"}}.
  # In args and expectations "$name.path" is a saved value and "${name.path}" interpolates one;
  # ${run} is unique to the run. Verbs: those of `Verbs.call`.
  class Scenario
    @clients = {} of String => JobQueue::Client
    @saved = {} of String => JSON::Any

    def initialize(@url : String, @tokens : Hash(String, String))
      # ${run}: unique to this run, so a scenario's ids and queues never meet an earlier run's.
      @saved["run"] = JSON::Any.new("#{Time.utc.to_unix_ms.to_s(16)}#{Random.rand(1 << 30).to_s(16)}#{Process.pid.to_s(16)}")
    end

    # The token the conformance worker uses: the work role's.
    def self.worker_token(tokens : Hash(String, String)) : String
      %w(work worker all admin).each { |role| return tokens[role] if tokens.has_key?(role) }
      raise ScenarioError.new("JOBQUEUE_TOKENS has no work token")
    end

    # A verb's canonical name: ids_add, id.add are ids.add; worker.claim is claim.
    def self.canonical_verb(name : String) : String
      verb = name.strip
      verb = verb[7..] if verb.starts_with?("worker.") || verb.starts_with?("worker_")
      %w(ids_ id_ id. ids.).each do |prefix|
        return "ids.#{verb[prefix.size..]}" if verb.starts_with?(prefix)
      end
      {"get" => "get_job", "batch" => "enqueue_batch", "enqueue_many" => "enqueue_batch", "stop" => "stop_worker"}
        .fetch(verb, verb)
    end

    def run(scenario : JSON::Any) : Nil
      steps = scenario["steps"]?.try(&.as_a?) || raise ScenarioError.new("no steps")
      steps.each_with_index do |item, index|
        step = item.as_h?
        verb = step ? Scenario.canonical_verb(first(step, "verb", "call", "op").try(&.as_s?) || "") : ""
        begin
          raise ScenarioError.new("a step is not an object") unless step
          run_step(step, verb)
        rescue e : ScenarioError
          raise ScenarioError.new("step #{index + 1} (#{verb}): #{e.message}")
        end
      end
    end

    private def first(step : Hash(String, JSON::Any), *names : String) : JSON::Any?
      names.each { |name| return step[name] if step.has_key?(name) }
      nil
    end

    private def has?(step : Hash(String, JSON::Any), *names : String) : Bool
      names.any? { |name| step.has_key?(name) }
    end

    private def run_step(step : Hash(String, JSON::Any), verb : String) : Nil
      role = first(step, "token", "role", "as").try(&.as_s?) || "all"
      args = resolve(first(step, "args", "params", "with", "input") || JSON::Any.new({} of String => JSON::Any)).as_h? ||
             raise ScenarioError.new("args is not an object")
      expected_error = has?(step, "error", "expect_error", "raises") ? resolve(first(step, "error", "expect_error", "raises").not_nil!) : nil
      answer = begin
        Verbs.call(client(role), verb, args)
      rescue e : JobQueue::Error
        raise ScenarioError.new("unexpected #{kind(e)}: #{e.message}") unless expected_error
        check_error(expected_error, e)
        save(step, error_json(e))
        return
      end
      if expected_error
        raise ScenarioError.new("expected #{expected_error.to_json}, got the answer #{answer.to_json}")
      end
      if has?(step, "expect", "expected", "result")
        problem = mismatch(resolve(first(step, "expect", "expected", "result").not_nil!), answer, "")
        raise ScenarioError.new("#{problem} in #{answer.to_json}") if problem
      end
      save(step, answer)
    end

    # "save": "name" keeps the whole answer; "save": {"name": "path.in.answer"} parts of it.
    private def save(step : Hash(String, JSON::Any), answer : JSON::Any) : Nil
      spec = step["save"]?
      return unless spec
      if name = spec.as_s?
        @saved[name] = answer
      elsif names = spec.as_h?
        names.each do |name, path|
          node = answer
          path.as_s.lchop('$').lchop('.').split('.').reject(&.empty?).each do |part|
            found = dig(node, part)
            raise ScenarioError.new("nothing at #{path.as_s} to save in #{answer.to_json}") if found.nil? || found.raw.nil?
            node = found
          end
          @saved[name] = node
        end
      end
    end

    # The member *part* of *node* (an index of an array), or nil when there is none.
    private def dig(node : JSON::Any, part : String) : JSON::Any?
      if (items = node.as_a?) && (index = part.to_i?)
        items[index]?
      elsif hash = node.as_h?
        hash[part]?
      end
    end

    private def client(role : String) : JobQueue::Client
      @clients[role] ||= begin
        token = @tokens[role]? || raise ScenarioError.new("no token of role #{role} in JOBQUEUE_TOKENS")
        JobQueue::Client.new(@url, token)
      end
    end

    # The error's class, canonically: DuplicateJob.
    private def kind(error : JobQueue::Error) : String
      error.class.name.split("::").last
    end

    private def error_json(error : JobQueue::Error) : JSON::Any
      body = error.body.as_h?.try(&.dup) || {} of String => JSON::Any
      body["status"] = JSON::Any.new(error.status.to_i64)
      body["class"] = JSON::Any.new(kind(error))
      body["code"] = JSON::Any.new(error.code)
      JSON::Any.new(body)
    end

    private def check_error(expected : JSON::Any, error : JobQueue::Error) : Nil
      if want = expected.as_s?
        # A class (DuplicateJob) or a code (duplicate_job).
        unless want == kind(error) || want == error.code
          raise ScenarioError.new("expected #{want}, got #{kind(error)}: #{error.message}")
        end
        return
      end
      wanted = expected.as_h?.try(&.dup) || raise ScenarioError.new("an expected error is a class, a code or an object")
      klass = wanted.delete("class") || wanted.delete("type")
      wanted.delete("type")
      if klass && klass.as_s? != kind(error)
        raise ScenarioError.new("expected #{klass}, got #{kind(error)}: #{error.message}")
      end
      actual = error_json(error)
      problem = mismatch(JSON::Any.new(wanted), actual, "")
      raise ScenarioError.new("#{problem} in the error #{actual.to_json}") if problem
    end

    # Why *actual* does not contain *expected*, or nil when it does.
    private def mismatch(expected : JSON::Any, actual : JSON::Any, at : String) : String?
      label = at.empty? ? "the answer" : at
      if want = expected.as_h?
        got = actual.as_h?
        return "expected an object at #{label}, got #{actual.to_json}" unless got
        want.each do |key, value|
          path = at.empty? ? key : "#{at}.#{key}"
          return "no #{path}" unless got.has_key?(key)
          problem = mismatch(value, got[key], path)
          return problem if problem
        end
        return nil
      end
      if want_items = expected.as_a?
        got_items = actual.as_a?
        unless got_items && got_items.size == want_items.size
          return "expected #{want_items.size} items at #{label}, got #{actual.to_json}"
        end
        want_items.each_with_index do |value, index|
          problem = mismatch(value, got_items[index], "#{at}[#{index}]")
          return problem if problem
        end
        return nil
      end
      if number?(expected) && number?(actual)
        return expected.raw.as(Int64 | Float64).to_f == actual.raw.as(Int64 | Float64).to_f ? nil : "#{label} is #{actual.to_json}, expected #{expected.to_json}"
      end
      expected == actual ? nil : "#{label} is #{actual.to_json}, expected #{expected.to_json}"
    end

    private def number?(value : JSON::Any) : Bool
      value.raw.is_a?(Int64) || value.raw.is_a?(Float64)
    end

    # Replace "$name.path" strings with saved values and ${name.path} in text.
    private def resolve(value : JSON::Any) : JSON::Any
      if text = value.as_s?
        return lookup(text[1..]) if text.starts_with?('$') && !text.starts_with?("${") && text.size > 1
        replaced = text.gsub(/\$\{([^}]*)\}/) do |_, match|
          found = lookup(match[1])
          found.as_s? || found.to_json
        end
        raise ScenarioError.new("unclosed reference in #{text}") if replaced.includes?("${")
        JSON::Any.new(replaced)
      elsif hash = value.as_h?
        JSON::Any.new(hash.transform_values { |item| resolve(item) })
      elsif items = value.as_a?
        JSON::Any.new(items.map { |item| resolve(item) })
      else
        value
      end
    end

    private def lookup(path : String) : JSON::Any
      node = JSON::Any.new(@saved)
      path.split('.').each do |part|
        found = dig(node, part)
        raise ScenarioError.new("nothing saved at #{path}") if found.nil?
        return found if found.raw.nil?
        node = found
      end
      node
    end
  end
end
