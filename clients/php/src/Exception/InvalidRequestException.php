<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 422 invalid_request: a body field is invalid; field names it, reason() says why. */
class InvalidRequestException extends GatewayException
{
}
