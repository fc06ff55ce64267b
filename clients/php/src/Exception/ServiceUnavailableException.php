<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 503 (or 502, 504): the gateway cannot serve now; retryAfter says when to try again. */
class ServiceUnavailableException extends GatewayException
{
}
