<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 415 not_json: the body was not JSON (never sent by this client). */
class NotJsonException extends GatewayException
{
}
