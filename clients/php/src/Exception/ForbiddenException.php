<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 403 forbidden: the token lacks the scope (scope()) or is not allowed the queue. */
class ForbiddenException extends GatewayException
{
}
