<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

use DjangoJobQueue\Client\Exception\GatewayException;

/**
 * A client of the HTTP SDK gateway (docs/gateway.md): the producer calls and the
 * worker protocol's calls. Answers are the gateway's JSON as associative arrays
 * (an empty JSON object reads as []); every refusal throws the GatewayException
 * subclass of its code. One curl handle per client, kept alive between requests.
 *
 *     $jq = new Client('http://127.0.0.1:8000', 'jqt_...');
 *     $jq->enqueue('emails.send', ['to' => 'a@example.com'], ['queue' => 'emails', 'delay' => '5s']);
 */
final class Client
{
    /** The options of an enqueue, in the gateway's JobIn names. */
    public const ENQUEUE_OPTIONS = ['queue', 'priority', 'delay', 'run_at', 'expires_ms', 'timeout_ms',
        'max_retry', 'unique_key', 'unique_mode', 'unique_ttl_ms', 'id', 'limit_key', 'batch', 'after',
        'on_upstream_failure'];
    public const VERSION = '0.1.0';

    /** The gateway's root, ending in "/sdk". */
    public readonly string $baseUrl;
    /** The id verbs. */
    public readonly IdVerbs $ids;
    private readonly string $token;
    private readonly int $timeoutMs;
    private ?\CurlHandle $curl = null;
    private ?int $curlPid = null;

    /**
     * @param string $url the site's root ("http://127.0.0.1:8000") or the gateway's (".../sdk")
     * @param string $token an API token ("jqt_...", manage.py jobqueue token create)
     * @param int $timeoutMs ms a request may take (default 30000); a claim adds its wait_ms
     * @throws \InvalidArgumentException on a missing url or token, or no curl extension
     */
    public function __construct(string $url, string $token, int $timeoutMs = 30000)
    {
        if ($url === '') {
            throw new \InvalidArgumentException('url is required (the site\'s root, e.g. http://127.0.0.1:8000)');
        }
        if ($token === '') {
            throw new \InvalidArgumentException('token is required (manage.py jobqueue token create)');
        }
        if (!extension_loaded('curl')) {
            throw new \InvalidArgumentException('the curl extension is missing (apt-get install php-curl)');
        }
        $root = rtrim($url, '/');
        $this->baseUrl = str_ends_with($root, '/sdk') ? $root : $root . '/sdk';
        $this->token = $token;
        $this->timeoutMs = $timeoutMs;
        $this->ids = new IdVerbs($this);
    }

    /**
     * Enqueue one job.
     *
     * @param mixed $payload any JSON value
     * @param array<string, mixed> $options queue, priority (1 runs first), delay ("500ms", "5s",
     *   "1m" or seconds), run_at (DateTimeInterface or ISO 8601 with an offset), expires_ms,
     *   timeout_ms, max_retry, unique_key, unique_mode ("while_locked", "until_executing",
     *   "until_executed"), unique_ttl_ms, id, limit_key (the key a partitioned limit counts it
     *   under, docs/limits.md), and here only (not in a batch) batch (an open batch's id), after
     *   (a list of jids it waits for, "blocked" until each is done) and on_upstream_failure
     *   ("cancel", "skip", "ignore"), docs/workflows.md
     * @return array{status: string, jid: string} status "enqueued" or "deduplicated"
     * @throws Exception\InvalidRequestException (422), Exception\DuplicateJobException (409, a held id),
     *   Exception\ProRequiredException (402), Exception\ForbiddenException (403)
     * @throws \InvalidArgumentException on an unknown option
     */
    public function enqueue(string $jobType, mixed $payload = null, array $options = []): array
    {
        return $this->request('POST', '/jobs', self::jobBody($jobType, $payload, $options));
    }

    /**
     * Enqueue jobs all or nothing.
     *
     * @param list<array<string, mixed>> $jobs each ['job_type' => ..., 'payload' => ..., option => ...]
     * @return list<array{status: string, jid: string}> one per job, in order
     * @throws GatewayException as enqueue, for the first refused job (index()); nothing is stored then
     */
    public function enqueueBatch(array $jobs): array
    {
        $bodies = [];
        foreach ($jobs as $job) {
            $type = (string) ($job['job_type'] ?? '');
            $payload = $job['payload'] ?? null;
            unset($job['job_type'], $job['payload']);
            $bodies[] = self::jobBody($type, $payload, $job);
        }
        return $this->request('POST', '/jobs/batch', ['jobs' => $bodies])['results'];
    }

    /**
     * The job (JobOut) with this jid.
     *
     * @return array<string, mixed>
     * @throws Exception\NotFoundException when there is none
     */
    public function getJob(string $jid): array
    {
        return $this->request('GET', '/jobs/' . self::segment($jid));
    }

    /**
     * Cancel a job: a waiting one at once, a running one by request (its worker sees cancel_requested).
     *
     * @return array{cancelled: bool, cancel_requested: bool}
     */
    public function cancel(string $jid): array
    {
        return $this->request('POST', '/jobs/' . self::segment($jid) . '/cancel', new \stdClass());
    }

    /** Make a failed or cancelled job due again (admin scope); true if it was. */
    public function retry(string $jid): bool
    {
        return $this->request('POST', '/jobs/' . self::segment($jid) . '/retry', new \stdClass())['retried'];
    }

    /**
     * Register a worker.
     *
     * @param array<string, mixed> $registration queues (required), name (omit to have one made),
     *   host, pid, languages, job_types, concurrency, version
     * @return array{name: string, lease_ms: int, heartbeat_ms: int, max_wait_ms: int}
     * @throws Exception\ForbiddenException for another token's name
     */
    public function register(array $registration): array
    {
        return $this->request('POST', '/worker/register', self::compact($registration));
    }

    /**
     * Claim up to limit (1..100) due jobs, waiting up to wait_ms (0..30000 ms) for one.
     *
     * @param array<string, mixed> $claim queues (required), job_types, limit, wait_ms, worker, lease_ms
     * @return list<array<string, mixed>> claimed jobs (jid, payload, lease_token, timeout_ms, ...)
     */
    public function claim(array $claim): array
    {
        $claim = self::compact($claim);
        return $this->request('POST', '/worker/claim', $claim, null, (int) ($claim['wait_ms'] ?? 0))['jobs'];
    }

    /**
     * Extend a claimed job's lease.
     *
     * @param int|null $leaseMs ms (default: the site's LEASE_MS)
     * @return bool true when a cancel was requested
     * @throws Exception\LeaseLostException when the job is no longer held under that token
     */
    public function heartbeat(string $jid, string $leaseToken, ?int $leaseMs = null): bool
    {
        return $this->request('POST', '/worker/jobs/' . self::segment($jid) . '/heartbeat',
            self::compact(['lease_token' => $leaseToken, 'lease_ms' => $leaseMs]))['cancel_requested'];
    }

    /**
     * Report a claimed job done with its result (any JSON value).
     *
     * @return string the stored status ("done"; "init" when an id's set asked for one run more)
     * @throws Exception\LeaseLostException
     */
    public function complete(string $jid, string $leaseToken, mixed $result = null): string
    {
        return $this->request('POST', '/worker/jobs/' . self::segment($jid) . '/complete',
            ['lease_token' => $leaseToken, 'result' => $result])['status'];
    }

    /**
     * Report a claimed job failed.
     *
     * @param array<string, mixed> $failure error (the message), exception_class (the error's
     *   class), retry (false dead-letters it at once), cancelled (true after a cancel request)
     * @return string the stored status ("retry", "max_retry", "error", "cancelled", ...)
     * @throws Exception\LeaseLostException
     */
    public function fail(string $jid, string $leaseToken, array $failure = []): string
    {
        return $this->request('POST', '/worker/jobs/' . self::segment($jid) . '/fail',
            self::compact(['lease_token' => $leaseToken] + $failure))['status'];
    }

    /**
     * Report a worker stopped; false if it was stopped already.
     *
     * @throws Exception\NotFoundException for an unknown name
     * @throws Exception\ForbiddenException for another token's worker
     */
    public function stopWorker(string $name): bool
    {
        return $this->request('POST', '/worker/stop', ['name' => $name])['stopped'];
    }

    /**
     * One request.
     *
     * @param string $method GET, POST or DELETE
     * @param string $path below /sdk, starting with "/", already percent-encoded
     * @param mixed $body a JSON-able value, or null for none
     * @param array<string, mixed>|null $query null values left out
     * @param int $extraMs added to the timeout (a claim's wait)
     * @return mixed the parsed JSON answer
     * @throws GatewayException the subclass of a refusal; UnreachableException (status 0) when no answer came
     * @throws \JsonException when the body cannot be encoded as JSON
     */
    public function request(string $method, string $path, mixed $body = null, ?array $query = null, int $extraMs = 0): mixed
    {
        $url = $this->baseUrl . $path;
        $query = self::compact($query ?? []);
        if ($query !== []) {
            $url .= '?' . http_build_query($query, '', '&', PHP_QUERY_RFC3986);
        }
        $headers = ['Authorization: Bearer ' . $this->token, 'Accept: application/json',
            'User-Agent: jobqueue-client-php/' . self::VERSION, 'Expect:'];
        $curl = $this->handle();
        curl_setopt($curl, CURLOPT_URL, $url);
        curl_setopt($curl, CURLOPT_CUSTOMREQUEST, $method);
        curl_setopt($curl, CURLOPT_HTTPGET, $method === 'GET');
        if ($body !== null) {
            $headers[] = 'Content-Type: application/json';
            curl_setopt($curl, CURLOPT_POSTFIELDS, json_encode($body, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION | JSON_INVALID_UTF8_SUBSTITUTE));
        } elseif ($method !== 'GET') {
            curl_setopt($curl, CURLOPT_POSTFIELDS, '');
        }
        curl_setopt($curl, CURLOPT_HTTPHEADER, $headers);
        curl_setopt($curl, CURLOPT_TIMEOUT_MS, $this->timeoutMs + $extraMs);
        $retryAfter = null;
        curl_setopt($curl, CURLOPT_HEADERFUNCTION, static function ($handle, string $line) use (&$retryAfter): int {
            if (stripos($line, 'retry-after:') === 0) {
                $retryAfter = trim(substr($line, strlen('retry-after:')));
            }
            return strlen($line);
        });
        $text = curl_exec($curl);
        if ($text === false) {
            $timedOut = curl_errno($curl) === CURLE_OPERATION_TIMEDOUT;
            $detail = $timedOut
                ? sprintf('no answer from %s within %d ms', $url, $this->timeoutMs + $extraMs)
                : sprintf('cannot reach %s: %s', $url, curl_error($curl));
            $this->close();
            throw GatewayException::fromResponse(0, ['error' => $timedOut ? 'timeout' : 'connection_failed', 'detail' => $detail]);
        }
        $status = (int) curl_getinfo($curl, CURLINFO_RESPONSE_CODE);
        $data = null;
        $parsed = false;
        if ($text !== '') {
            try {
                $data = json_decode((string) $text, true, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
                $parsed = true;
            } catch (\JsonException) {
                $parsed = false;
            }
        }
        if ($status >= 200 && $status < 300 && $parsed) {
            return $data;
        }
        if (!is_array($data) || !isset($data['error'])) {
            $data = ['error' => ($status >= 200 && $status < 300) ? 'bad_answer' : 'http_' . $status,
                'detail' => sprintf('%s answered %d: %s', $url, $status, substr((string) $text, 0, 200))];
        }
        throw GatewayException::fromResponse($status, $data, $retryAfter);
    }

    /**
     * The JobIn body of one job (null options left out).
     *
     * @param array<string, mixed> $options
     * @return array<string, mixed>
     * @throws \InvalidArgumentException on an unknown option
     */
    public static function jobBody(string $jobType, mixed $payload, array $options): array
    {
        $unknown = array_diff(array_keys($options), self::ENQUEUE_OPTIONS);
        if ($unknown !== []) {
            throw new \InvalidArgumentException('unknown enqueue option(s) ' . implode(', ', $unknown));
        }
        $body = ['job_type' => $jobType];
        if ($payload !== null) {
            $body['payload'] = $payload;
        }
        foreach (self::compact($options) as $name => $value) {
            $body[$name] = self::time($value);
        }
        return $body;
    }

    /** ISO 8601 (with microseconds and offset) of a DateTimeInterface; other values as they are. */
    public static function time(mixed $value): mixed
    {
        return $value instanceof \DateTimeInterface ? $value->format('Y-m-d\TH:i:s.uP') : $value;
    }

    /** A path segment, percent-encoded. */
    public static function segment(string $text): string
    {
        return rawurlencode($text);
    }

    /**
     * @param array<string, mixed> $values
     * @return array<string, mixed> without the null values
     */
    public static function compact(array $values): array
    {
        return array_filter($values, static fn ($value) => $value !== null);
    }

    public function __destruct()
    {
        $this->close();
    }

    /** The curl handle; a forked process opens its own instead of sharing the parent's connection. */
    private function handle(): \CurlHandle
    {
        $pid = getmypid();
        if ($this->curl === null || $this->curlPid !== $pid) {
            $this->curl = curl_init();
            $this->curlPid = $pid;
            curl_setopt_array($this->curl, [
                CURLOPT_RETURNTRANSFER => true,
                CURLOPT_CONNECTTIMEOUT_MS => $this->timeoutMs,
                CURLOPT_NOSIGNAL => true,
                CURLOPT_FOLLOWLOCATION => false,
            ]);
        }
        return $this->curl;
    }

    private function close(): void
    {
        if ($this->curl !== null && $this->curlPid === getmypid()) {
            curl_close($this->curl);
        }
        $this->curl = null;
    }
}
