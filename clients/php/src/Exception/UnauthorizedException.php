<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 401 unauthorized: no token, or an unknown, revoked or expired one. */
class UnauthorizedException extends GatewayException
{
}
