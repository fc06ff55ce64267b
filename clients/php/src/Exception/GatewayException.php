<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/**
 * Any refusal of the gateway, or a failure to reach it (status 0). Every non-2xx
 * answer is thrown as the subclass of its status and code (docs/gateway.md,
 * "Errors"), so callers catch what they mean.
 */
class GatewayException extends \RuntimeException
{
    /** @var int the HTTP status; 0 when no answer came (connection refused, timeout) */
    public readonly int $status;
    /** @var string the gateway's `error` code, e.g. "invalid_request", "lease_lost" */
    public readonly string $errorCode;
    /** @var string the gateway's explanation */
    public readonly string $detail;
    /** @var string|null the field the error is about ("jobs[3].priority" in a batch) */
    public readonly ?string $field;
    /** @var array<string, mixed> the whole JSON body (index, reason, jid, scope when present) */
    public readonly array $body;
    /** @var float|null seconds to wait before trying again (Retry-After), or null */
    public readonly ?float $retryAfter;

    /**
     * @param int $status the HTTP status (0: no answer)
     * @param array<string, mixed> $body the JSON error body {"error", "detail", "field", ...}
     * @param float|null $retryAfter seconds, from Retry-After
     */
    public function __construct(int $status, array $body, ?float $retryAfter = null)
    {
        $this->status = $status;
        $this->body = $body;
        $this->errorCode = (string) ($body['error'] ?? 'error');
        $this->detail = (string) ($body['detail'] ?? '');
        $this->field = isset($body['field']) ? (string) $body['field'] : null;
        $this->retryAfter = $retryAfter;
        $text = $status . ' ' . $this->errorCode . ': ' . $this->detail;
        if ($this->field !== null) {
            $text .= ' (field ' . $this->field . ')';
        }
        parent::__construct($text, $status);
    }

    /** A batch's refused job, by position, or null. */
    public function index(): ?int
    {
        return is_int($this->body['index'] ?? null) ? $this->body['index'] : null;
    }

    /** The package's own code of an invalid_request, or null. */
    public function reason(): ?string
    {
        return isset($this->body['reason']) ? (string) $this->body['reason'] : null;
    }

    /** A duplicate id's holder (409 duplicate_job), or null. */
    public function jid(): ?string
    {
        return isset($this->body['jid']) ? (string) $this->body['jid'] : null;
    }

    /** The scope a 403 lacked, or null. */
    public function scope(): ?string
    {
        return isset($this->body['scope']) ? (string) $this->body['scope'] : null;
    }

    /**
     * The typed exception for an answer.
     *
     * @param int $status the HTTP status (0: no answer)
     * @param array<string, mixed> $body the parsed JSON body
     * @param string|null $retryAfter the Retry-After header's value (seconds or an HTTP date)
     */
    public static function fromResponse(int $status, array $body, ?string $retryAfter = null): self
    {
        $wait = self::parseRetryAfter($retryAfter);
        $code = $body['error'] ?? null;
        return match (true) {
            $status === 400 => new BadRequestException($status, $body, $wait),
            $status === 401 => new UnauthorizedException($status, $body, $wait),
            $status === 402 => new ProRequiredException($status, $body, $wait),
            $status === 403 => new ForbiddenException($status, $body, $wait),
            $status === 404 => new NotFoundException($status, $body, $wait),
            $status === 405 => new MethodNotAllowedException($status, $body, $wait),
            $status === 409 && $code === 'lease_lost' => new LeaseLostException($status, $body, $wait),
            $status === 409 => new DuplicateJobException($status, $body, $wait),
            $status === 413 => new BodyTooLargeException($status, $body, $wait),
            $status === 415 => new NotJsonException($status, $body, $wait),
            $status === 422 => new InvalidRequestException($status, $body, $wait),
            $status === 429 => new RateLimitedException($status, $body, $wait),
            $status === 0 => new UnreachableException($status, $body, $wait),
            $status === 503 && $code === 'lock_timeout' => new LockTimeoutException($status, $body, $wait),
            $status === 503 && $code === 'database_unavailable' => new DatabaseUnavailableException($status, $body, $wait),
            in_array($status, [502, 503, 504], true) => new ServiceUnavailableException($status, $body, $wait),
            default => new self($status, $body, $wait),
        };
    }

    /** Seconds from a Retry-After value (seconds or an HTTP date), or null. */
    public static function parseRetryAfter(?string $value): ?float
    {
        if ($value === null || trim($value) === '') {
            return null;
        }
        if (is_numeric(trim($value))) {
            return max(0.0, (float) trim($value));
        }
        $at = strtotime($value);
        return $at === false ? null : max(0.0, (float) ($at - time()));
    }
}
