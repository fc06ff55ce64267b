<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

/**
 * What a handler gets beside the payload: the claimed job's fields, and the cancel
 * flag its worker sets (with SIGUSR1 to the job's process) when a heartbeat answers
 * cancel_requested.
 */
final class JobContext
{
    private bool $cancelRequested;

    /**
     * @param array<string, mixed> $job the claimed job as the gateway sent it
     * @param Client $client a client the handler may use (its own connection)
     */
    public function __construct(public readonly array $job, public readonly Client $client)
    {
        $this->cancelRequested = ($job['cancel_requested'] ?? false) === true;
    }

    public function jid(): string
    {
        return (string) $this->job['jid'];
    }

    public function queue(): string
    {
        return (string) $this->job['queue'];
    }

    public function jobType(): string
    {
        return (string) $this->job['job_type'];
    }

    /** The id the job holds (docs/design.md#ids), or null. */
    public function id(): ?string
    {
        return isset($this->job['id']) ? (string) $this->job['id'] : null;
    }

    /** 1 on the first run. */
    public function attempt(): int
    {
        return (int) $this->job['attempt'];
    }

    public function maxRetry(): int
    {
        return (int) $this->job['max_retry'];
    }

    /** The job's timeout, ms: past it the job's process is killed and the attempt fails. */
    public function timeoutMs(): int
    {
        return (int) $this->job['timeout_ms'];
    }

    /** True once a heartbeat answered cancel_requested: stop and throw. */
    public function cancelRequested(): bool
    {
        return $this->cancelRequested;
    }

    /** Throw CancelledException if a cancel was requested (call it between steps). */
    public function checkCancel(): void
    {
        if ($this->cancelRequested) {
            throw new CancelledException('cancel requested');
        }
    }

    /** @internal set by the worker's signal */
    public function markCancelRequested(): void
    {
        $this->cancelRequested = true;
    }
}
