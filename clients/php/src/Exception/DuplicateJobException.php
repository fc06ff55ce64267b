<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 409 duplicate_job: the id is held by job jid(). */
class DuplicateJobException extends GatewayException
{
}
