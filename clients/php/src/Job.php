<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

/**
 * A job class: the worker runs perform() of a new instance per claimed job (in a
 * process of its own), and its return value (any JSON value) is the job's result.
 *
 *     final class Greet implements Job
 *     {
 *         public function perform(mixed $payload, JobContext $ctx): mixed
 *         {
 *             return ['greeting' => 'Hello, ' . $payload['name']];
 *         }
 *     }
 *
 * Throw PermanentFailure to dead-letter the job at once; any other throwable is
 * retried with backoff.
 */
interface Job
{
    /**
     * @param mixed $payload the job's JSON payload (objects as associative arrays)
     * @param JobContext $ctx the claimed job's fields and its cancel flag
     * @return mixed the job's result, any JSON-encodable value
     */
    public function perform(mixed $payload, JobContext $ctx): mixed;
}
