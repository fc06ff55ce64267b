<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 400 bad_request: a path or query parameter is malformed; field names it. */
class BadRequestException extends GatewayException
{
}
