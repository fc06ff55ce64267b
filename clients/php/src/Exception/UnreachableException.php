<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** Status 0: the gateway could not be reached (connection_failed) or did not answer in time (timeout). */
class UnreachableException extends ServiceUnavailableException
{
}
