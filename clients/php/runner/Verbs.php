<?php

declare(strict_types=1);

namespace DjangoJobQueue\Conformance;

use DjangoJobQueue\Client\Client;

/** A scenario that did not hold (or could not be read): its reason is the report's. */
final class ScenarioError extends \RuntimeException
{
}

/**
 * The conformance suite's language-neutral verbs, each made through the PHP client's
 * own call: arguments in the gateway's names (snake_case), answers as the gateway's
 * JSON. Arguments come as decoded by json_decode without assoc: JSON objects inside
 * them (payloads, values, results) stay stdClass, so {} is sent as {}.
 */
final class Verbs
{
    private const ID_VALUE = ['value', 'job_type', 'at', 'delay'];

    /**
     * @param array<string, mixed> $args
     */
    public static function call(Client $client, string $verb, array $args): mixed
    {
        switch ($verb) {
            case 'enqueue':
                self::known($args, Client::ENQUEUE_OPTIONS, 'job_type', 'payload', 'options');
                return $client->enqueue(self::text($args, 'job_type'), $args['payload'] ?? null, self::enqueueOptions($args));
            case 'enqueue_batch':
                self::known($args, [], 'jobs');
                $jobs = [];
                foreach (self::list(self::required($args, 'jobs')) as $item) {
                    $job = self::object($item);
                    self::known($job, Client::ENQUEUE_OPTIONS, 'job_type', 'payload', 'options');
                    $jobs[] = ['job_type' => self::text($job, 'job_type'), 'payload' => $job['payload'] ?? null] + self::enqueueOptions($job);
                }
                return ['results' => $client->enqueueBatch($jobs)];
            case 'get_job':
                self::known($args, [], 'jid');
                return $client->getJob(self::text($args, 'jid'));
            case 'cancel':
                self::known($args, [], 'jid');
                return $client->cancel(self::text($args, 'jid'));
            case 'retry':
                self::known($args, [], 'jid');
                return ['retried' => $client->retry(self::text($args, 'jid'))];
            case 'ids.add':
                self::known($args, self::ID_VALUE, 'queue', 'id');
                return ['added' => $client->ids->add(self::text($args, 'queue'), self::text($args, 'id'), self::idValue($args))];
            case 'ids.set':
                self::known($args, self::ID_VALUE, 'queue', 'id');
                return ['set' => $client->ids->set(self::text($args, 'queue'), self::text($args, 'id'), self::idValue($args))];
            case 'ids.update':
                self::known($args, self::ID_VALUE, 'queue', 'id');
                return ['updated' => $client->ids->update(self::text($args, 'queue'), self::text($args, 'id'), self::idValue($args))];
            case 'ids.cancel':
                self::known($args, [], 'queue', 'id');
                return ['cancelled' => $client->ids->cancel(self::text($args, 'queue'), self::text($args, 'id'))];
            case 'ids.get':
                self::known($args, [], 'queue', 'id');
                return $client->ids->get(self::text($args, 'queue'), self::text($args, 'id'));
            case 'ids.list':
                self::known($args, ['prefix', 'state', 'limit', 'cursor'], 'queue');
                $queue = self::text($args, 'queue');
                unset($args['queue']);
                return $client->ids->list($queue, $args);
            case 'register':
                self::known($args, ['name', 'host', 'pid', 'languages', 'job_types', 'concurrency', 'version'], 'queues');
                return $client->register(['queues' => self::strings(self::required($args, 'queues'))] + $args);
            case 'claim':
                self::known($args, ['job_types', 'limit', 'wait_ms', 'worker', 'lease_ms'], 'queues');
                return ['jobs' => $client->claim(['queues' => self::strings(self::required($args, 'queues'))] + $args)];
            case 'heartbeat':
                self::known($args, ['lease_ms'], 'jid', 'lease_token');
                return ['cancel_requested' => $client->heartbeat(self::text($args, 'jid'), self::text($args, 'lease_token'),
                    isset($args['lease_ms']) ? (int) $args['lease_ms'] : null)];
            case 'complete':
                self::known($args, ['result'], 'jid', 'lease_token');
                return ['status' => $client->complete(self::text($args, 'jid'), self::text($args, 'lease_token'), $args['result'] ?? null)];
            case 'fail':
                self::known($args, ['error', 'exception_class', 'retry', 'cancelled'], 'jid', 'lease_token');
                $jid = self::text($args, 'jid');
                $token = self::text($args, 'lease_token');
                unset($args['jid'], $args['lease_token']);
                return ['status' => $client->fail($jid, $token, $args)];
            case 'stop_worker':
                self::known($args, [], 'name');
                return ['stopped' => $client->stopWorker(self::text($args, 'name')), 'name' => self::text($args, 'name')];
            default:
                throw new ScenarioError('unknown verb ' . $verb);
        }
    }

    /**
     * @param array<string, mixed> $args
     * @return array<string, mixed>
     */
    private static function enqueueOptions(array $args): array
    {
        $source = isset($args['options']) && $args['options'] instanceof \stdClass ? get_object_vars($args['options']) : $args;
        return array_intersect_key($source, array_flip(Client::ENQUEUE_OPTIONS));
    }

    /**
     * @param array<string, mixed> $args
     * @return array<string, mixed>
     */
    private static function idValue(array $args): array
    {
        return array_intersect_key($args, array_flip(self::ID_VALUE));
    }

    /**
     * Refuse an argument the verb does not take: a misspelt scenario fails loudly.
     *
     * @param array<string, mixed> $args
     * @param list<string> $optional
     */
    private static function known(array $args, array $optional, string ...$required): void
    {
        foreach (array_keys($args) as $name) {
            if (!in_array($name, $optional, true) && !in_array($name, $required, true)) {
                throw new ScenarioError('unknown argument ' . $name);
            }
        }
    }

    /** @param array<string, mixed> $args */
    private static function required(array $args, string $name): mixed
    {
        if (!array_key_exists($name, $args)) {
            throw new ScenarioError('missing argument ' . $name);
        }
        return $args[$name];
    }

    /** @param array<string, mixed> $args */
    private static function text(array $args, string $name): string
    {
        $value = self::required($args, $name);
        return is_string($value) ? $value : self::json($value);
    }

    /** @return list<mixed> */
    private static function list(mixed $value): array
    {
        if (!is_array($value) || !array_is_list($value)) {
            throw new ScenarioError('not an array: ' . self::json($value));
        }
        return $value;
    }

    /** @return array<string, mixed> */
    private static function object(mixed $value): array
    {
        if (!$value instanceof \stdClass) {
            throw new ScenarioError('not an object: ' . self::json($value));
        }
        return get_object_vars($value);
    }

    /** @return list<string> */
    private static function strings(mixed $value): array
    {
        return array_map(static fn ($item) => is_string($item) ? $item : self::json($item), self::list($value));
    }

    /** JSON text of a value. */
    public static function json(mixed $value): string
    {
        return (string) json_encode($value, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_PARTIAL_OUTPUT_ON_ERROR);
    }
}
