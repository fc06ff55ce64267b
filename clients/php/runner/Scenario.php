<?php

declare(strict_types=1);

namespace DjangoJobQueue\Conformance;

use DjangoJobQueue\Client\Client;
use DjangoJobQueue\Client\Exception\GatewayException;

/**
 * One scenario: its steps, run in order through the client, with the values they saved.
 * A scenario is {"name", "steps": [step, ...]}; a step is
 * {"verb" (or "call", "op"), "args" ("with", "params", "input"): the gateway's field names,
 *  "token" ("as", "role"): a role of JOBQUEUE_TOKENS (default "all"),
 *  "expect" ("expected", "result"): a subset of the answer's JSON,
 *  "error" ("raises", "expect_error"): a class (DuplicateJob), a code (duplicate_job), or a
 *    subset of the error body plus "status", "class", "code",
 *  "save": a name for the answer (or the error), or {name: "path.in.answer"}}.
 * In args and expectations "$name.path" is a saved value and "${name.path}" interpolates one;
 * ${run} is unique to the run. Verbs: those of Verbs::call.
 */
final class Scenario
{
    /** @var array<string, Client> */
    private array $clients = [];
    /** @var array<string, mixed> */
    private array $saved;

    /** @param array<string, string> $tokens */
    public function __construct(private readonly string $url, private readonly array $tokens)
    {
        // ${run}: unique to this run, so a scenario's ids and queues never meet an earlier run's.
        $this->saved = ['run' => dechex(hrtime(true)) . dechex(getmypid())];
    }

    /**
     * The token the conformance worker uses: the work role's.
     *
     * @param array<string, string> $tokens
     */
    public static function workerToken(array $tokens): string
    {
        foreach (['work', 'worker', 'all', 'admin'] as $role) {
            if (isset($tokens[$role])) {
                return $tokens[$role];
            }
        }
        throw new ScenarioError('JOBQUEUE_TOKENS has no work token');
    }

    /** A verb's canonical name: ids_add, id.add are ids.add; worker.claim is claim. */
    public static function canonicalVerb(string $name): string
    {
        $verb = trim($name);
        if (str_starts_with($verb, 'worker.') || str_starts_with($verb, 'worker_')) {
            $verb = substr($verb, 7);
        }
        foreach (['ids_', 'id_', 'id.', 'ids.'] as $prefix) {
            if (str_starts_with($verb, $prefix)) {
                return 'ids.' . substr($verb, strlen($prefix));
            }
        }
        return ['get' => 'get_job', 'batch' => 'enqueue_batch', 'enqueue_many' => 'enqueue_batch', 'stop' => 'stop_worker'][$verb] ?? $verb;
    }

    public function run(\stdClass $scenario): void
    {
        $steps = $scenario->steps ?? null;
        if (!is_array($steps)) {
            throw new ScenarioError('no steps');
        }
        foreach ($steps as $index => $step) {
            $verb = $step instanceof \stdClass ? self::canonicalVerb((string) (self::first($step, 'verb', 'call', 'op') ?? '')) : '';
            try {
                if (!$step instanceof \stdClass) {
                    throw new ScenarioError('a step is not an object');
                }
                $this->step($step, $verb);
            } catch (ScenarioError $e) {
                throw new ScenarioError(sprintf('step %d (%s): %s', $index + 1, $verb, $e->getMessage()));
            }
        }
    }

    private static function first(\stdClass $step, string ...$names): mixed
    {
        foreach ($names as $name) {
            if (property_exists($step, $name)) {
                return $step->{$name};
            }
        }
        return null;
    }

    private static function has(\stdClass $step, string ...$names): bool
    {
        foreach ($names as $name) {
            if (property_exists($step, $name)) {
                return true;
            }
        }
        return false;
    }

    private function step(\stdClass $step, string $verb): void
    {
        $role = (string) (self::first($step, 'token', 'role', 'as') ?? 'all');
        $args = $this->resolve(self::first($step, 'args', 'params', 'with', 'input') ?? new \stdClass());
        if (!$args instanceof \stdClass) {
            throw new ScenarioError('args is not an object');
        }
        $expectedError = self::has($step, 'error', 'expect_error', 'raises') ? $this->resolve(self::first($step, 'error', 'expect_error', 'raises')) : null;
        try {
            $answer = Verbs::call($this->client($role), $verb, get_object_vars($args));
        } catch (GatewayException $e) {
            if ($expectedError === null) {
                throw new ScenarioError(sprintf('unexpected %s: %s', self::kind($e), $e->getMessage()));
            }
            $this->checkError($expectedError, $e);
            $this->save($step, self::errorJson($e));
            return;
        }
        if ($expectedError !== null) {
            throw new ScenarioError(sprintf('expected %s, got the answer %s', Verbs::json($expectedError), Verbs::json($answer)));
        }
        if (self::has($step, 'expect', 'expected', 'result')) {
            $problem = self::mismatch($this->resolve(self::first($step, 'expect', 'expected', 'result')), $answer, '');
            if ($problem !== null) {
                throw new ScenarioError($problem . ' in ' . Verbs::json($answer));
            }
        }
        $this->save($step, $answer);
    }

    /** "save": "name" keeps the whole answer; "save": {"name": "path.in.answer"} parts of it. */
    private function save(\stdClass $step, mixed $answer): void
    {
        $spec = $step->save ?? null;
        if (is_string($spec)) {
            $this->saved[$spec] = $answer;
            return;
        }
        if (!$spec instanceof \stdClass) {
            return;
        }
        foreach (get_object_vars($spec) as $name => $path) {
            $node = $answer;
            foreach (array_filter(explode('.', ltrim(ltrim((string) $path, '$'), '.')), 'strlen') as $part) {
                [$found, $node] = self::dig($node, $part);
                if (!$found || $node === null) {
                    throw new ScenarioError(sprintf('nothing at %s to save in %s', $path, Verbs::json($answer)));
                }
            }
            $this->saved[$name] = $node;
        }
    }

    /** @return array{0: bool, 1: mixed} whether $part is in $node, and its value */
    private static function dig(mixed $node, string $part): array
    {
        if ($node instanceof \stdClass) {
            $node = get_object_vars($node);
        }
        if (is_array($node) && array_is_list($node) && ctype_digit($part)) {
            return array_key_exists((int) $part, $node) ? [true, $node[(int) $part]] : [false, null];
        }
        if (is_array($node) && array_key_exists($part, $node)) {
            return [true, $node[$part]];
        }
        return [false, null];
    }

    private function client(string $role): Client
    {
        if (!isset($this->clients[$role])) {
            if (!isset($this->tokens[$role])) {
                throw new ScenarioError('no token of role ' . $role . ' in JOBQUEUE_TOKENS');
            }
            $this->clients[$role] = new Client($this->url, $this->tokens[$role]);
        }
        return $this->clients[$role];
    }

    /** The exception's class, canonically: DuplicateJobException is DuplicateJob. */
    private static function kind(GatewayException $e): string
    {
        $short = substr(strrchr('\\' . get_class($e), '\\'), 1);
        return str_ends_with($short, 'Exception') ? substr($short, 0, -strlen('Exception')) : $short;
    }

    /** @return array<string, mixed> */
    private static function errorJson(GatewayException $e): array
    {
        return ['status' => $e->status, 'class' => self::kind($e), 'code' => $e->errorCode] + $e->body;
    }

    private function checkError(mixed $expected, GatewayException $e): void
    {
        if (is_string($expected)) {
            // A class (DuplicateJob) or a code (duplicate_job).
            if ($expected !== self::kind($e) && $expected !== $e->errorCode) {
                throw new ScenarioError(sprintf('expected %s, got %s: %s', $expected, self::kind($e), $e->getMessage()));
            }
            return;
        }
        if (!$expected instanceof \stdClass) {
            throw new ScenarioError('an expected error is a class, a code or an object');
        }
        $wanted = clone $expected;
        $class = $wanted->class ?? $wanted->type ?? null;
        unset($wanted->class, $wanted->type);
        if ($class !== null && $class !== self::kind($e)) {
            throw new ScenarioError(sprintf('expected %s, got %s: %s', $class, self::kind($e), $e->getMessage()));
        }
        $actual = self::errorJson($e);
        $problem = self::mismatch($wanted, $actual, '');
        if ($problem !== null) {
            throw new ScenarioError($problem . ' in the error ' . Verbs::json($actual));
        }
    }

    /** Why $actual does not contain $expected, or null when it does. */
    private static function mismatch(mixed $expected, mixed $actual, string $at): ?string
    {
        $label = $at === '' ? 'the answer' : $at;
        if ($actual instanceof \stdClass) {
            $actual = get_object_vars($actual);
        }
        if ($expected instanceof \stdClass) {
            if (!is_array($actual) || ($actual !== [] && array_is_list($actual))) {
                return sprintf('expected an object at %s, got %s', $label, Verbs::json($actual));
            }
            foreach (get_object_vars($expected) as $key => $value) {
                $path = $at === '' ? (string) $key : $at . '.' . $key;
                if (!array_key_exists($key, $actual)) {
                    return 'no ' . $path;
                }
                $problem = self::mismatch($value, $actual[$key], $path);
                if ($problem !== null) {
                    return $problem;
                }
            }
            return null;
        }
        if (is_array($expected)) {
            if (!is_array($actual) || !array_is_list($actual) || count($actual) !== count($expected)) {
                return sprintf('expected %d items at %s, got %s', count($expected), $label, Verbs::json($actual));
            }
            foreach (array_values($expected) as $index => $value) {
                $problem = self::mismatch($value, $actual[$index], sprintf('%s[%d]', $at, $index));
                if ($problem !== null) {
                    return $problem;
                }
            }
            return null;
        }
        if ((is_int($expected) || is_float($expected)) && (is_int($actual) || is_float($actual))) {
            return $expected == $actual ? null : sprintf('%s is %s, expected %s', $label, Verbs::json($actual), Verbs::json($expected));
        }
        return $expected === $actual ? null : sprintf('%s is %s, expected %s', $label, Verbs::json($actual), Verbs::json($expected));
    }

    /** Replace "$name.path" strings with saved values and ${name.path} in text. */
    private function resolve(mixed $value): mixed
    {
        if (is_string($value)) {
            if (str_starts_with($value, '$') && !str_starts_with($value, '${') && strlen($value) > 1) {
                return $this->lookup(substr($value, 1));
            }
            $text = preg_replace_callback('/\$\{([^}]*)\}/', function (array $m): string {
                $found = $this->lookup($m[1]);
                return is_string($found) ? $found : Verbs::json($found);
            }, $value);
            if (str_contains((string) $text, '${')) {
                throw new ScenarioError('unclosed reference in ' . $value);
            }
            return $text;
        }
        if ($value instanceof \stdClass) {
            $copy = new \stdClass();
            foreach (get_object_vars($value) as $key => $item) {
                $copy->{$key} = $this->resolve($item);
            }
            return $copy;
        }
        if (is_array($value)) {
            return array_map(fn ($item) => $this->resolve($item), $value);
        }
        return $value;
    }

    private function lookup(string $path): mixed
    {
        $node = $this->saved;
        foreach (explode('.', $path) as $part) {
            [$found, $node] = self::dig($node, $part);
            if (!$found) {
                throw new ScenarioError('nothing saved at ' . $path);
            }
            if ($node === null) {
                return null;
            }
        }
        return $node;
    }
}
