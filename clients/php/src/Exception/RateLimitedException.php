<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 429 rate_limited: the token is over its request rate; retryAfter says when to try again. */
class RateLimitedException extends GatewayException
{
}
