<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 405 method_not_allowed: the route exists, not with this method. */
class MethodNotAllowedException extends GatewayException
{
}
