<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client\Exception;

/** 503 database_unavailable: the database did not answer. */
class DatabaseUnavailableException extends ServiceUnavailableException
{
}
