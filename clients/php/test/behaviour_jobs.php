<?php

declare(strict_types=1);

/*
 * The handlers of tests/client/test_worker_behaviour.py, for bin/jobqueue-worker
 * --handlers: one job type whose payload's "mode" picks what the handler does.
 */

use DjangoJobQueue\Client\Job;
use DjangoJobQueue\Client\JobContext;
use DjangoJobQueue\Client\PermanentFailure;

final class BehaviourJob implements Job
{
    public function perform(mixed $payload, JobContext $ctx): mixed
    {
        switch ($payload['mode']) {
            case 'slow': // seconds, checking for a cancel request every 0.1 s
                for ($i = 0; $i < $payload['seconds'] * 10; $i++) {
                    $ctx->checkCancel();
                    usleep(100000);
                }
                return ['slept' => $payload['seconds']];
            case 'fail':
                throw new \DomainException('bad thing');
            case 'permanent':
                throw new PermanentFailure('never again');
            case 'crash':
                exit(3); // the job's process dies without an outcome
            case 'empty':
                return new \stdClass();
            default:
                throw new \DomainException('unknown mode ' . json_encode($payload['mode']));
        }
    }
}

return ['behave.run' => BehaviourJob::class];
