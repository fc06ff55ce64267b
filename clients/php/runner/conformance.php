<?php

declare(strict_types=1);

/*
 * The PHP client's conformance runner (clients/conformance/README.md).
 *
 *   php runner/conformance.php run <scenarios_dir>  # every scenario JSON through the client
 *   php runner/conformance.php worker               # a Worker on $JOBQUEUE_QUEUE until SIGTERM
 *
 * run prints "ok NAME" or "not ok NAME: reason" per scenario and "N passed, N failed"
 * last; exit status 0 iff all passed. worker runs the client's Worker on
 * JOBQUEUE_QUEUE at JOBQUEUE_CONCURRENCY (default 4), handling conformance.echo,
 * conformance.spawn (an enqueue from inside a handler) and conformance.sleep, until SIGTERM (it drains, then
 * exits 0). Environment: JOBQUEUE_URL (the gateway, http://127.0.0.1:PORT/sdk) and
 * JOBQUEUE_TOKENS (a JSON file mapping a token role to its token). A setup problem exits 2.
 */

namespace DjangoJobQueue\Conformance;

use DjangoJobQueue\Client\Client;
use DjangoJobQueue\Client\JobContext;
use DjangoJobQueue\Client\Worker;

require __DIR__ . '/../src/autoload.php';
require __DIR__ . '/Verbs.php';
require __DIR__ . '/Scenario.php';

function env(string $name): string
{
    $value = getenv($name);
    if ($value === false || trim($value) === '') {
        throw new ScenarioError($name . ' is not set');
    }
    return $value;
}

/** @return array<string, string> */
function tokens(): array
{
    $path = env('JOBQUEUE_TOKENS');
    $text = @file_get_contents($path);
    try {
        $data = $text === false ? null : json_decode($text, true, 16, JSON_THROW_ON_ERROR);
    } catch (\JsonException $e) {
        throw new ScenarioError('cannot read JOBQUEUE_TOKENS ' . $path . ': ' . $e->getMessage());
    }
    if (!is_array($data)) {
        throw new ScenarioError('JOBQUEUE_TOKENS ' . $path . ' is not a JSON object');
    }
    return array_filter($data, 'is_string');
}

function oneLine(string $text): string
{
    return str_replace(["\r", "\n"], ' ', $text);
}

function runScenarios(string $dir): int
{
    if (!is_dir($dir)) {
        throw new ScenarioError('no directory ' . $dir);
    }
    $files = glob(rtrim($dir, '/') . '/*.json') ?: [];
    sort($files, SORT_STRING);
    if ($files === []) {
        throw new ScenarioError('no scenario JSON in ' . $dir);
    }
    $url = env('JOBQUEUE_URL');
    $tokens = tokens();
    $passed = $failed = 0;
    foreach ($files as $file) {
        $name = basename($file, '.json');
        try {
            $scenario = json_decode((string) file_get_contents($file), false, 512, JSON_THROW_ON_ERROR);
            if (!$scenario instanceof \stdClass) {
                throw new ScenarioError('the scenario is not a JSON object');
            }
            if (is_string($scenario->name ?? null)) {
                $name = $scenario->name;
            }
            (new Scenario($url, $tokens))->run($scenario);
            echo 'ok ', $name, "\n";
            $passed++;
        } catch (ScenarioError $e) {
            echo 'not ok ', $name, ': ', oneLine($e->getMessage()), "\n";
            $failed++;
        } catch (\Throwable $e) {
            echo 'not ok ', $name, ': ', get_class($e), ': ', oneLine($e->getMessage()), "\n";
            $failed++;
        }
    }
    echo $passed, ' passed, ', $failed, " failed\n";
    return $failed === 0 ? 0 : 1;
}

/** The worker of the mixed drain: echoes each payload back with the language. */
function runWorker(): int
{
    $url = env('JOBQUEUE_URL');
    $token = Scenario::workerToken(tokens());
    $queue = env('JOBQUEUE_QUEUE');
    $text = trim((string) getenv('JOBQUEUE_CONCURRENCY'));
    if ($text !== '' && !ctype_digit($text)) {
        throw new ScenarioError('JOBQUEUE_CONCURRENCY is not a number: ' . $text);
    }
    $client = new Client($url, $token);
    $handlers = [
        'conformance.echo' => static fn (mixed $payload, JobContext $ctx): array => ['lang' => 'php', 'payload' => $payload],
        // An enqueue from inside a handler, with the worker's own client.
        'conformance.spawn' => static function (mixed $payload, JobContext $ctx) use ($client): array {
            $answer = $client->enqueue((string) $payload['job_type'], $payload['payload'] ?? null, ['queue' => $payload['queue'] ?? null]);
            return ['lang' => 'php', 'jid' => $answer['jid']];
        },
        // A job that runs a while (the harness's SIGTERM drain): payload.ms milliseconds.
        'conformance.sleep' => static function (mixed $payload, JobContext $ctx): array {
            $ms = (int) $payload['ms'];
            usleep($ms * 1000);
            return ['lang' => 'php', 'slept' => $ms];
        },
    ];
    $stats = (new Worker($client, $handlers, [$queue], concurrency: $text === '' ? 4 : (int) $text))->run();
    fwrite(STDERR, 'conformance (php): worker stopped: ' . json_encode($stats) . "\n");
    return 0;
}

try {
    $args = array_slice($argv, 1);
    if (count($args) === 2 && $args[0] === 'run') {
        exit(runScenarios($args[1]));
    }
    if ($args === ['worker']) {
        exit(runWorker());
    }
    fwrite(STDERR, "usage: conformance run <scenarios_dir> | worker\n");
    exit(2);
} catch (ScenarioError $e) {
    fwrite(STDERR, 'conformance (php): ' . $e->getMessage() . "\n");
    exit(2);
}
