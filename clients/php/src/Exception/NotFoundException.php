<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 404 not_found: no such job, a free id, or no such route. */
class NotFoundException extends GatewayException
{
}
