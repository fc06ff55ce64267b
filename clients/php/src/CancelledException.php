<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

/** Thrown by JobContext::checkCancel() once a cancel was requested; the job is reported cancelled. */
class CancelledException extends \RuntimeException
{
}
