<?php

declare(strict_types=1);

namespace DjangoJobQueue\Client;

/** Throw it from a handler to dead-letter the job at once (the fail report's retry is false). */
class PermanentFailure extends \RuntimeException
{
}
