# frozen_string_literal: true

require "json"

require_relative "verbs"

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
  # ${run} is unique to the run. Verbs: those of Conformance::Verbs.
  class Scenario
    # The token the conformance worker uses: the work role's.
    def self.worker_token(tokens)
      role = %w[work worker all admin].find { |r| tokens.key?(r) }
      raise ScenarioError, "JOBQUEUE_TOKENS has no work token" if role.nil?

      tokens[role]
    end

    # A verb's canonical name: ids_add, id.add are ids.add; worker.claim is claim.
    def self.canonical_verb(name)
      verb = name.to_s.strip
      verb = verb[7..] if verb.start_with?("worker.", "worker_")
      prefix = %w[ids_ id_ id. ids.].find { |p| verb.start_with?(p) }
      return "ids.#{verb[prefix.length..]}" if prefix

      { "get" => "get_job", "batch" => "enqueue_batch", "enqueue_many" => "enqueue_batch",
        "stop" => "stop_worker" }.fetch(verb, verb)
    end

    def initialize(url, tokens)
      @url = url
      @tokens = tokens
      @clients = {}
      # ${run}: unique to this run, so a scenario's ids and queues never meet an earlier run's.
      @saved = { "run" => "#{Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond).to_s(16)}#{Process.pid.to_s(16)}" }
    end

    def run(scenario)
      steps = scenario["steps"]
      raise ScenarioError, "no steps" unless steps.is_a?(Array)

      steps.each_with_index do |step, index|
        verb = step.is_a?(Hash) ? self.class.canonical_verb(first(step, "verb", "call", "op") || "") : ""
        begin
          raise ScenarioError, "a step is not an object" unless step.is_a?(Hash)

          run_step(step, verb)
        rescue ScenarioError => e
          raise ScenarioError, "step #{index + 1} (#{verb}): #{e.message}"
        end
      end
    end

    private

    def first(step, *names)
      name = names.find { |n| step.key?(n) }
      name && step[name]
    end

    def has?(step, *names) = names.any? { |n| step.key?(n) }

    def run_step(step, verb)
      role = first(step, "token", "role", "as") || "all"
      args = resolve(first(step, "args", "params", "with", "input") || {})
      raise ScenarioError, "args is not an object" unless args.is_a?(Hash)

      expected_error = has?(step, "error", "expect_error", "raises") ? resolve(first(step, "error", "expect_error", "raises")) : nil
      begin
        answer = Verbs.call(client(role), verb, args)
      rescue JobQueue::Error => e
        raise ScenarioError, "unexpected #{kind(e)}: #{e.message}" if expected_error.nil?

        check_error(expected_error, e)
        save(step, error_json(e))
        return
      end
      raise ScenarioError, "expected #{JSON.generate(expected_error)}, got the answer #{JSON.generate(answer)}" if expected_error

      if has?(step, "expect", "expected", "result")
        problem = mismatch(resolve(first(step, "expect", "expected", "result")), answer, "")
        raise ScenarioError, "#{problem} in #{JSON.generate(answer)}" if problem
      end
      save(step, answer)
    end

    # "save": "name" keeps the whole answer; "save": {"name": "path.in.answer"} parts of it.
    def save(step, answer)
      spec = step["save"]
      case spec
      when String then @saved[spec] = answer
      when Hash
        spec.each do |name, path|
          node = answer
          path.to_s.sub(/\A\$/, "").sub(/\A\./, "").split(".").reject(&:empty?).each do |part|
            node = dig(node, part)
            raise ScenarioError, "nothing at #{path} to save in #{JSON.generate(answer)}" if node.equal?(MISSING) || node.nil?
          end
          @saved[name] = node
        end
      end
    end

    MISSING = Object.new.freeze
    private_constant :MISSING

    def dig(node, part)
      if node.is_a?(Array) && part.match?(/\A\d+\z/)
        part.to_i < node.length ? node[part.to_i] : MISSING
      elsif node.is_a?(Hash)
        node.key?(part) ? node[part] : MISSING
      else
        MISSING
      end
    end

    def client(role)
      @clients[role] ||= begin
        raise ScenarioError, "no token of role #{role} in JOBQUEUE_TOKENS" unless @tokens.key?(role)

        JobQueue::Client.new(@url, @tokens[role])
      end
    end

    # The error's class name: DuplicateJob.
    def kind(error) = error.class.name.split("::").last

    # The names an expected error may give: its class, canonically (no Error or
    # Exception suffix), and its code.
    def names(error) = [kind(error), error.code]

    def error_json(error)
      error.body.merge("status" => error.status, "class" => kind(error), "code" => error.code)
    end

    def check_error(expected, error)
      if expected.is_a?(String)
        # A class (DuplicateJob) or a code (duplicate_job).
        raise ScenarioError, "expected #{expected}, got #{kind(error)}: #{error.message}" unless names(error).include?(expected)

        return
      end
      raise ScenarioError, "an expected error is a class, a code or an object" unless expected.is_a?(Hash)

      wanted = expected.dup
      klass = wanted.delete("class") || wanted.delete("type")
      wanted.delete("type")
      if klass && !names(error).include?(klass)
        raise ScenarioError, "expected #{klass}, got #{kind(error)}: #{error.message}"
      end

      actual = error_json(error)
      problem = mismatch(wanted, actual, "")
      raise ScenarioError, "#{problem} in the error #{JSON.generate(actual)}" if problem
    end

    # Why `actual` does not contain `expected`, or nil when it does.
    def mismatch(expected, actual, at)
      label = at.empty? ? "the answer" : at
      case expected
      when Hash
        return "expected an object at #{label}, got #{JSON.generate(actual)}" unless actual.is_a?(Hash)

        expected.each do |key, value|
          path = at.empty? ? key : "#{at}.#{key}"
          return "no #{path}" unless actual.key?(key)

          problem = mismatch(value, actual[key], path)
          return problem if problem
        end
        nil
      when Array
        unless actual.is_a?(Array) && actual.length == expected.length
          return "expected #{expected.length} items at #{label}, got #{JSON.generate(actual)}"
        end

        expected.each_with_index do |value, index|
          problem = mismatch(value, actual[index], "#{at}[#{index}]")
          return problem if problem
        end
        nil
      when Numeric
        actual.is_a?(Numeric) && actual == expected ? nil : "#{label} is #{JSON.generate(actual)}, expected #{expected}"
      else
        expected == actual ? nil : "#{label} is #{JSON.generate(actual)}, expected #{JSON.generate(expected)}"
      end
    end

    # Replace "$name.path" strings with saved values and ${name.path} in text.
    def resolve(value)
      case value
      when String
        return lookup(value[1..]) if value.start_with?("$") && !value.start_with?("${") && value.length > 1

        value.gsub(/\$\{([^}]*)\}/) do
          found = lookup(Regexp.last_match(1))
          found.is_a?(String) ? found : JSON.generate(found)
        end.tap do |text|
          raise ScenarioError, "unclosed reference in #{value}" if text.include?("${")
        end
      when Hash then value.transform_values { |v| resolve(v) }
      when Array then value.map { |v| resolve(v) }
      else value
      end
    end

    def lookup(path)
      node = @saved
      path.split(".").each do |part|
        node = dig(node, part)
        raise ScenarioError, "nothing saved at #{path}" if node.equal?(MISSING)
        return nil if node.nil?
      end
      node
    end
  end
end
