<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 409 lease_lost: a report on a job no longer held under that lease token; drop the outcome. */
class LeaseLostException extends GatewayException
{
}
