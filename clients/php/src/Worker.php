<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

use DjangoJobQueue\Client\Exception\GatewayException;
use DjangoJobQueue\Client\Exception\LeaseLostException;
use DjangoJobQueue\Client\Exception\RateLimitedException;
use DjangoJobQueue\Client\Exception\ServiceUnavailableException;

/**
 * A worker loop over the gateway's worker protocol (docs/gateway.md, "The worker
 * protocol"): register, long-poll claims, run each job in a forked process of its own
 * (at most `concurrency` at once) that reports complete or fail, while this process
 * heartbeats it every heartbeat_ms, and on stop (or SIGTERM/SIGINT) claim no
 * more, finish and report the running jobs (those of a claim in flight too), then
 * report the stop. A handler that crashes its process, or outlives its job's
 * timeout_ms (its process is killed), fails the attempt; the worker goes on.
 *
 *     $worker = new Worker($jq, ['hello.greet' => Greet::class], ['hello'], concurrency: 4);
 *     $stats = $worker->run();   // until stop() or SIGTERM
 *
 * Needs the pcntl and posix extensions (Debian's php-cli has both).
 */
final class Worker
{
    /** Longest error message and exception class name sent in a fail report. */
    private const MAX_ERROR = 10000;
    private const MAX_CLASS = 200;

    public readonly string $name;
    /** @var array<string, Job|class-string<Job>|callable> */
    private readonly array $handlers;
    /** @var list<string> */
    private readonly array $queues;
    /** @var \Closure(string, string): void */
    private readonly \Closure $logger;
    private bool $stopping = false;
    private int $maxWaitMs = 30000;
    private float $claimAfter = 0.0;
    private float $backoff = 0.5;
    /** @var array<string, array<string, mixed>> jid => the running job's process and timers */
    private array $running = [];
    /** @var array{claimed: int, done: int, failed: int, cancelled: int, lease_lost: int} */
    private array $stats = ['claimed' => 0, 'done' => 0, 'failed' => 0, 'cancelled' => 0, 'lease_lost' => 0];

    /**
     * @param Client $client a client whose token has the work scope on the queues
     * @param array<string, Job|class-string<Job>|callable> $handlers job type => a Job
     *   instance, a Job class name (a new instance per run), or a callable (payload, JobContext)
     * @param list<string> $queues the queues it serves
     * @param int $concurrency jobs run at once, 1..100
     * @param string|null $name the registered name (default "<host>-<pid>-php")
     * @param int $waitMs a claim's long-poll, ms (default 5000; the gateway caps it)
     * @param int|null $leaseMs lease asked for each claim and heartbeat, ms (default: the site's LEASE_MS)
     * @param int|null $heartbeatMs heartbeat interval, ms (default: the registration's heartbeat_ms)
     * @param bool $handleSignals stop on SIGTERM and SIGINT (a second one exits at once)
     * @param (callable(string, string): void)|null $logger (level, message); default: stderr
     * @throws \InvalidArgumentException on no handler, no queue, a concurrency off 1..100, or no pcntl/posix
     */
    public function __construct(
        private readonly Client $client,
        array $handlers,
        array $queues,
        private readonly int $concurrency = 1,
        ?string $name = null,
        private readonly int $waitMs = 5000,
        private readonly ?int $leaseMs = null,
        private ?int $heartbeatMs = null,
        private readonly bool $handleSignals = true,
        ?callable $logger = null,
    ) {
        if (!function_exists('pcntl_fork') || !function_exists('posix_kill')) {
            throw new \InvalidArgumentException('the Worker needs the pcntl and posix extensions (Debian\'s php-cli has them)');
        }
        if ($handlers === []) {
            throw new \InvalidArgumentException('handlers must map at least one job type to a handler');
        }
        foreach ($handlers as $type => $handler) {
            $isJobClass = is_string($handler) && is_subclass_of($handler, Job::class);
            if (!is_string($type) || $type === '' || !($handler instanceof Job || $isJobClass || is_callable($handler))) {
                throw new \InvalidArgumentException(sprintf('the handler of %s is not a Job, a Job class name or a callable', (string) $type));
            }
        }
        if ($queues === []) {
            throw new \InvalidArgumentException('queues must name at least one queue');
        }
        if ($concurrency < 1 || $concurrency > 100) {
            throw new \InvalidArgumentException(sprintf('concurrency must be an integer 1..100, got %d', $concurrency));
        }
        $this->handlers = $handlers;
        $this->queues = array_values(array_map('strval', $queues));
        $this->name = $name ?? gethostname() . '-' . getmypid() . '-php';
        $this->logger = $logger !== null ? \Closure::fromCallable($logger) : static function (string $level, string $message): void {
            fwrite(STDERR, 'jobqueue-worker: ' . $level . ' ' . $message . "\n");
        };
    }

    /**
     * The run's counts so far.
     *
     * @return array{claimed: int, done: int, failed: int, cancelled: int, lease_lost: int}
     */
    public function stats(): array
    {
        return $this->stats;
    }

    /** Whether stop() was called (or a signal came). */
    public function stopping(): bool
    {
        return $this->stopping;
    }

    /** Claim no more; run() returns once the running jobs have been reported. Safe in a signal handler. */
    public function stop(): void
    {
        $this->stopping = true;
    }

    /**
     * Register, then claim and run jobs until stop() (or SIGTERM/SIGINT).
     *
     * @return array{claimed: int, done: int, failed: int, cancelled: int, lease_lost: int} the counts,
     *   once every running job and the stop have been reported
     * @throws GatewayException when the gateway refuses the token or the registration
     *   (401, 403, ...); an unreachable gateway, 503 and 429 are retried with backoff
     */
    public function run(): array
    {
        $previous = $this->handleSignals ? $this->trapSignals() : null;
        try {
            $registration = $this->register();
            if ($registration === null) {
                return $this->stats;
            }
            $this->heartbeatMs ??= (int) $registration['heartbeat_ms'];
            $this->maxWaitMs = (int) ($registration['max_wait_ms'] ?? 30000);
            $this->log('INFO', sprintf('registered %s: queues=%s job_types=%s concurrency=%d', $this->name,
                implode(',', $this->queues), implode(',', array_keys($this->handlers)), $this->concurrency));
            while (!$this->stopping || $this->running !== []) {
                $this->reap();
                $this->tend();
                if (!$this->stopping && count($this->running) < $this->concurrency && microtime(true) >= $this->claimAfter) {
                    $this->claim();
                } elseif ($this->running !== [] || $this->stopping === false) {
                    usleep(20000);
                }
            }
            $this->log('INFO', 'stopping: the running jobs were reported');
            try {
                // Gone from the console and `jobqueue status` at once, not three heartbeats later.
                $this->client->stopWorker($this->name);
            } catch (GatewayException $e) {
                $this->log('WARNING', sprintf('could not report the stop of %s: %s', $this->name, $e->getMessage()));
            }
        } finally {
            while ($this->running !== []) {
                $this->reap();
                $this->tend();
                usleep(20000);
            }
            if ($previous !== null) {
                foreach ($previous as $signal => $handler) {
                    pcntl_signal($signal, $handler);
                }
            }
        }
        $s = $this->stats;
        $this->log('INFO', sprintf('stopped: claimed=%d done=%d failed=%d cancelled=%d lease_lost=%d',
            $s['claimed'], $s['done'], $s['failed'], $s['cancelled'], $s['lease_lost']));
        return $s;
    }

    /** @return array<int, mixed> the signals' previous handlers */
    private function trapSignals(): array
    {
        pcntl_async_signals(true);
        $previous = [];
        foreach ([SIGTERM => 'SIGTERM', SIGINT => 'SIGINT'] as $signal => $label) {
            $previous[$signal] = pcntl_signal_get_handler($signal);
            pcntl_signal($signal, function () use ($label): void {
                if ($this->stopping) {
                    exit(1); // a second signal forces
                }
                $this->log('INFO', sprintf('%s received: %d running job(s) finish first', $label, count($this->running)));
                $this->stop();
            });
        }
        return $previous;
    }

    /** @return array<string, mixed>|null the registration, or null once stopping */
    private function register(): ?array
    {
        while (!$this->stopping) {
            try {
                return $this->client->register([
                    'name' => $this->name, 'host' => gethostname(), 'pid' => getmypid(), 'languages' => ['php'],
                    'queues' => $this->queues, 'job_types' => array_keys($this->handlers),
                    'concurrency' => $this->concurrency, 'version' => Client::VERSION,
                ]);
            } catch (ServiceUnavailableException|RateLimitedException $e) {
                $this->pauseAfter($e);
                while (!$this->stopping && microtime(true) < $this->claimAfter) {
                    usleep(50000);
                }
            }
        }
        return null;
    }

    private function pauseAfter(GatewayException $e): void
    {
        $wait = $e->retryAfter ?? $this->backoff;
        $this->log('WARNING', sprintf('%s; trying again in %d ms', $e->getMessage(), (int) round($wait * 1000)));
        $this->claimAfter = microtime(true) + $wait;
        $this->backoff = min($this->backoff * 2, 10.0);
    }

    /** One claim; its wait ends before the next heartbeat or deadline is due. Jobs it answers always run. */
    private function claim(): void
    {
        $waitMs = min($this->waitMs, $this->maxWaitMs);
        foreach ($this->running as $entry) {
            $waitMs = min($waitMs, (int) max(0, (min($entry['beat_at'], $entry['deadline']) - microtime(true)) * 1000));
        }
        $asked = microtime(true);
        try {
            $jobs = $this->client->claim([
                'queues' => $this->queues, 'job_types' => array_keys($this->handlers),
                'limit' => $this->concurrency - count($this->running), 'wait_ms' => $waitMs,
                'worker' => $this->name, 'lease_ms' => $this->leaseMs,
            ]);
        } catch (ServiceUnavailableException|RateLimitedException $e) {
            $this->pauseAfter($e);
            return;
        }
        $this->backoff = 0.5;
        foreach ($jobs as $job) {
            $this->spawn($job);
        }
        if ($jobs === [] && $waitMs >= 1000 && microtime(true) - $asked < $waitMs / 2000) {
            // No jobs long before the wait ended: a WSGI server at its cap of waiting
            // claims answered at once (Retry-After: 1 s); claim again after it.
            $this->claimAfter = microtime(true) + 1.0;
        }
    }

    /** @param array<string, mixed> $job */
    private function spawn(array $job): void
    {
        $this->stats['claimed']++;
        $outcome = tempnam(sys_get_temp_dir(), 'jobqueue-');
        $pid = pcntl_fork();
        if ($pid === 0) {
            $this->runChild($job, (string) $outcome);
        }
        $now = microtime(true);
        $entry = ['job' => $job, 'file' => $outcome, 'pid' => $pid, 'cancel' => ($job['cancel_requested'] ?? false) === true,
            'lost' => false, 'timed_out' => false, 'beat_at' => $now + $this->heartbeatMs / 1000,
            'deadline' => $now + ((int) ($job['timeout_ms'] ?? 3600000)) / 1000];
        if ($pid < 0) {
            // No process for it: fail the attempt (retried) rather than hold the claim.
            $this->count($this->report($entry, ['ok' => false, 'error' => 'cannot fork a process for the job', 'class' => 'RuntimeError', 'retry' => true]));
            @unlink((string) $outcome);
            return;
        }
        $this->running[(string) $job['jid']] = $entry;
    }

    /**
     * The job's process: run the handler, write its outcome as JSON to $file, exit.
     *
     * @param array<string, mixed> $job
     */
    private function runChild(array $job, string $file): never
    {
        try {
            // The worker decides when to stop: a terminal's SIGINT to the group must not kill the job.
            pcntl_signal(SIGTERM, SIG_IGN);
            pcntl_signal(SIGINT, SIG_IGN);
            pcntl_async_signals(true);
            $ctx = new JobContext($job, $this->client);
            pcntl_signal(SIGUSR1, static function () use ($ctx): void {
                $ctx->markCancelRequested();
            });
            $outcome = $this->perform($job, $ctx);
            // The job's process reports its own outcome (the reports of several jobs go out
            // at once), then tells the worker what was stored.
            $entry = ['job' => $job, 'cancel' => $ctx->cancelRequested(), 'lost' => false];
            file_put_contents($file, (string) json_encode(['counted' => $this->report($entry, $outcome)]));
        } catch (\Throwable $e) {
            // Never back into the worker's loop: the worker reports a job whose process wrote nothing.
            fwrite(STDERR, sprintf("jobqueue-worker: ERROR job %s: %s: %s\n", $job['jid'], get_class($e), $e->getMessage()));
        }
        exit(0);
    }

    /**
     * Run the handler.
     *
     * @param array<string, mixed> $job
     * @return array<string, mixed> {ok: true, result} or {ok: false, error, class, retry}
     */
    private function perform(array $job, JobContext $ctx): array
    {
        try {
            $handler = $this->handlers[(string) $job['job_type']] ?? null;
            if ($handler === null) {
                throw new \LogicException('no handler for job type ' . $job['job_type']);
            }
            if (is_string($handler) && is_subclass_of($handler, Job::class)) {
                $handler = new $handler();
            }
            $result = $handler instanceof Job ? $handler->perform($job['payload'] ?? null, $ctx) : $handler($job['payload'] ?? null, $ctx);
            // Encoded here so a result that is not JSON fails the attempt with why.
            json_encode($result, JSON_THROW_ON_ERROR | JSON_PRESERVE_ZERO_FRACTION);
            return ['ok' => true, 'result' => $result];
        } catch (\Throwable $e) {
            $message = $e->getMessage() !== '' ? $e->getMessage() : get_class($e);
            return [
                'ok' => false,
                'error' => substr($message, 0, self::MAX_ERROR),
                'class' => substr(get_class($e), 0, self::MAX_CLASS),
                'retry' => !($e instanceof PermanentFailure) && !(method_exists($e, 'retry') && $e->retry() === false),
            ];
        }
    }

    /** Collect finished job processes and report their outcomes. */
    private function reap(): void
    {
        foreach ($this->running as $jid => $entry) {
            if (pcntl_waitpid($entry['pid'], $status, WNOHANG) !== $entry['pid']) {
                continue;
            }
            unset($this->running[$jid]);
            $text = (string) @file_get_contents($entry['file']);
            @unlink($entry['file']);
            try {
                $outcome = $text === '' ? null : json_decode($text, false, 512, JSON_THROW_ON_ERROR);
            } catch (\JsonException) {
                $outcome = null;
            }
            if (is_object($outcome) && is_string($outcome->counted ?? null)) {
                // Reported by the job's process: count what it stored.
                $this->count($outcome->counted);
                continue;
            }
            if ($entry['timed_out']) {
                $outcome = ['ok' => false, 'error' => sprintf('timed out after %d ms', $entry['job']['timeout_ms']),
                    'class' => 'TimeoutError', 'retry' => true];
            } elseif (!is_object($outcome)) {
                $how = pcntl_wifsignaled($status) ? 'was killed by signal ' . pcntl_wtermsig($status)
                    : 'exited with status ' . pcntl_wexitstatus($status);
                $outcome = ['ok' => false, 'error' => 'the job\'s process ' . $how . ' before reporting', 'class' => 'ProcessExited', 'retry' => true];
            } else {
                $outcome = (array) $outcome;
            }
            $this->count($this->report($entry, $outcome));
        }
    }

    /** Heartbeat the running jobs that are due, and kill those past their timeout. */
    private function tend(): void
    {
        $now = microtime(true);
        foreach ($this->running as $jid => $entry) {
            if (!$entry['timed_out'] && $now >= $entry['deadline']) {
                $this->running[$jid]['timed_out'] = true;
                posix_kill($entry['pid'], SIGKILL);
                continue;
            }
            if ($entry['lost'] || $now < $entry['beat_at']) {
                continue;
            }
            $this->running[$jid]['beat_at'] = $now + $this->heartbeatMs / 1000;
            try {
                if ($this->client->heartbeat($jid, (string) $entry['job']['lease_token'], $this->leaseMs) && !$entry['cancel']) {
                    $this->running[$jid]['cancel'] = true;
                    posix_kill($entry['pid'], SIGUSR1);
                }
            } catch (LeaseLostException) {
                $this->running[$jid]['lost'] = true;
            } catch (GatewayException $e) {
                $this->log('WARNING', sprintf('heartbeat of %s failed: %s', $jid, $e->getMessage()));
            }
        }
    }

    /**
     * Report one outcome; a lost lease drops it.
     *
     * @param array<string, mixed> $entry the job, its cancel flag and whether its lease was lost
     * @param array<string, mixed> $outcome {ok, result} or {ok: false, error, class, retry}
     * @return string what to count: done, failed, cancelled, lease_lost, or unreported
     */
    private function report(array $entry, array $outcome): string
    {
        $job = $entry['job'];
        $jid = (string) $job['jid'];
        if ($entry['lost']) {
            return $this->dropped($job);
        }
        try {
            if ($outcome['ok'] ?? false) {
                $this->reporting(fn () => $this->client->complete($jid, (string) $job['lease_token'], $outcome['result'] ?? null));
                return 'done';
            }
            $cancelled = (bool) $entry['cancel'];
            $status = $this->reporting(fn () => $this->client->fail($jid, (string) $job['lease_token'], [
                'error' => (string) ($outcome['error'] ?? 'no outcome'), 'exception_class' => (string) ($outcome['class'] ?? 'RuntimeError'),
                'retry' => (bool) ($outcome['retry'] ?? true), 'cancelled' => $cancelled,
            ]));
            $this->log('WARNING', sprintf('job %s (%s) failed: %s; stored %s', $jid, $job['job_type'], $outcome['class'] ?? '', $status));
            return $cancelled ? 'cancelled' : 'failed';
        } catch (LeaseLostException) {
            return $this->dropped($job);
        } catch (GatewayException|\JsonException $e) {
            $this->log('ERROR', sprintf('report of %s failed: %s', $jid, $e->getMessage()));
            return 'unreported';
        }
    }

    private function count(string $counted): void
    {
        if (isset($this->stats[$counted])) {
            $this->stats[$counted]++;
        }
    }

    /** A report, retried while the gateway is unreachable (the lease bounds this). */
    private function reporting(callable $call): mixed
    {
        $backoff = 0.25;
        for ($tries = 1; ; $tries++) {
            try {
                return $call();
            } catch (ServiceUnavailableException|RateLimitedException $e) {
                if ($tries >= 8) {
                    throw $e;
                }
                usleep((int) (($e->retryAfter ?? $backoff) * 1000000));
                $backoff = min($backoff * 2, 5.0);
            }
        }
    }

    /** @param array<string, mixed> $job */
    private function dropped(array $job): string
    {
        $this->log('WARNING', sprintf('job %s (%s): lease lost, outcome dropped', $job['jid'], $job['job_type']));
        return 'lease_lost';
    }

    private function log(string $level, string $message): void
    {
        ($this->logger)($level, $message);
    }
}
