<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 413 body_too_large: the request body is over the gateway's MAX_BODY_BYTES. */
class BodyTooLargeException extends GatewayException
{
}
