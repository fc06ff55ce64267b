<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 402 pro_required: a Pro unique mode or route without a valid licence. */
class ProRequiredException extends GatewayException
{
}
