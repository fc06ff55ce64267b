<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 503 lock_timeout: a creation lock timed out. */
class LockTimeoutException extends ServiceUnavailableException
{
}
