<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

use DjangoJobQueue\Client\Exception\NotFoundException;

/**
 * The id verbs (docs/design.md#ids): a queue's jobs named by an id, one job per id.
 * The id may contain "/"; each segment is percent-encoded. A value array takes
 * value (the payload), job_type (default: the queue's one job type), and at
 * (DateTimeInterface or ISO 8601) or delay.
 */
final class IdVerbs
{
    public function __construct(private readonly Client $client)
    {
    }

    /**
     * Enqueue a job holding this id unless one holds it.
     *
     * @param array<string, mixed> $value value, job_type, at, delay
     * @return bool true if added, false if the id was held
     */
    public function add(string $queue, string $id, array $value = []): bool
    {
        return $this->post($queue, $id, 'add', $value)['added'];
    }

    /**
     * Enqueue or replace the job holding this id (a running one runs once more).
     *
     * @param array<string, mixed> $value value, job_type, at, delay
     */
    public function set(string $queue, string $id, array $value = []): bool
    {
        return $this->post($queue, $id, 'set', $value)['set'];
    }

    /**
     * Change the waiting job holding this id.
     *
     * @param array<string, mixed> $value value, job_type, at, delay
     * @return bool false if none was changed
     */
    public function update(string $queue, string $id, array $value = []): bool
    {
        return $this->post($queue, $id, 'update', $value)['updated'];
    }

    /** Cancel the job holding this id; false if none was cancelled. */
    public function cancel(string $queue, string $id): bool
    {
        return $this->client->request('POST', $this->path($queue, $id) . '/cancel', new \stdClass())['cancelled'];
    }

    /**
     * The job holding this id (IdJobOut), or null when the id is free.
     *
     * @return array<string, mixed>|null
     */
    public function get(string $queue, string $id): ?array
    {
        try {
            return $this->client->request('GET', $this->path($queue, $id));
        } catch (NotFoundException) {
            return null;
        }
    }

    /**
     * A page of the queue's id jobs.
     *
     * @param array<string, mixed> $options prefix, state (a state word), limit, cursor (a "next")
     * @return array{jobs: list<array<string, mixed>>, next: string|null}
     */
    public function list(string $queue, array $options = []): array
    {
        $unknown = array_diff(array_keys($options), ['prefix', 'state', 'limit', 'cursor']);
        if ($unknown !== []) {
            throw new \InvalidArgumentException('unknown list option(s) ' . implode(', ', $unknown));
        }
        return $this->client->request('GET', '/queues/' . Client::segment($queue) . '/jobs', null, $options);
    }

    /**
     * @param array<string, mixed> $value
     * @return array<string, mixed>
     */
    private function post(string $queue, string $id, string $verb, array $value): array
    {
        $unknown = array_diff(array_keys($value), ['value', 'job_type', 'at', 'delay']);
        if ($unknown !== []) {
            throw new \InvalidArgumentException('unknown id value option(s) ' . implode(', ', $unknown));
        }
        $body = [];
        foreach ($value as $name => $item) {
            // A null value is sent (JSON null); the other options are left out when null.
            if ($item !== null || $name === 'value') {
                $body[$name] = Client::time($item);
            }
        }
        return $this->client->request('POST', $this->path($queue, $id) . '/' . $verb, $body === [] ? new \stdClass() : $body);
    }

    private function path(string $queue, string $id): string
    {
        return '/queues/' . Client::segment($queue) . '/ids/' . implode('/', array_map([Client::class, 'segment'], explode('/', $id)));
    }
}
