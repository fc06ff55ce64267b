#!/usr/bin/env node
/**
 * Run a gateway worker from the command line:
 *
 *   JQ_URL=http://127.0.0.1:8000 JQ_TOKEN=jqt_... \
 *     node dist/worker-cli.js --handlers ./handlers.js --queues emails,reports [--concurrency 4]
 *
 * The handler module's default export (or its `handlers` export) maps job types to
 * functions `(payload, ctx) => result`. Exit status: 0 after a graceful stop
 * (SIGTERM/SIGINT: running jobs finish and are reported first), 2 on a usage error,
 * 1 when the worker fails (e.g. the gateway refuses the token).
 */

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { GatewayError } from "./errors.js";
import { type Handlers, Worker } from "./worker.js";

const USAGE = `usage: worker-cli.js --handlers FILE --queues a,b [--concurrency N] [--url URL]
                     [--token TOKEN] [--name NAME] [--wait-ms MS]
environment: JQ_URL, JQ_TOKEN, JQ_QUEUES, JQ_CONCURRENCY, JQ_HANDLERS (the same,
             overridden by the arguments)`;

class UsageError extends Error {}

interface Arguments {
  url: string;
  token: string;
  handlers: string;
  queues: string[];
  concurrency: number;
  name?: string;
  waitMs?: number;
}

function positiveInt(name: string, text: string): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) {
    throw new UsageError(`${name} must be a non-negative integer, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** Parse argv (after the script) and the environment; throws UsageError. */
export function parseArguments(argv: string[], env: Record<string, string | undefined>): Arguments {
  const values: Record<string, string | undefined> = {
    url: env.JQ_URL,
    token: env.JQ_TOKEN,
    queues: env.JQ_QUEUES,
    concurrency: env.JQ_CONCURRENCY,
    handlers: env.JQ_HANDLERS,
  };
  const known = new Set(["url", "token", "queues", "concurrency", "handlers", "name", "wait-ms"]);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === "-h" || arg === "--help") {
      throw new UsageError("");
    }
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match || !known.has(match[1] as string)) {
      throw new UsageError(`unknown argument ${JSON.stringify(arg)}`);
    }
    let value = match[2];
    if (value === undefined) {
      value = argv[++i];
      if (value === undefined) {
        throw new UsageError(`${arg} needs a value`);
      }
    }
    values[match[1] as string] = value;
  }
  for (const [key, env_name] of [["url", "JQ_URL"], ["token", "JQ_TOKEN"], ["handlers", "JQ_HANDLERS"], ["queues", "JQ_QUEUES"]]) {
    if (!values[key as string]) {
      throw new UsageError(`--${key} (or ${env_name}) is required`);
    }
  }
  const queues = (values.queues as string).split(",").map((q) => q.trim()).filter(Boolean);
  if (queues.length === 0) {
    throw new UsageError("--queues must name at least one queue");
  }
  const concurrency = values.concurrency ? positiveInt("--concurrency", values.concurrency) : 1;
  if (concurrency < 1) {
    throw new UsageError("--concurrency must be at least 1");
  }
  return {
    url: values.url as string,
    token: values.token as string,
    handlers: values.handlers as string,
    queues,
    concurrency,
    name: values.name,
    waitMs: values["wait-ms"] !== undefined ? positiveInt("--wait-ms", values["wait-ms"]) : undefined,
  };
}

/** Import the handler module and return its job type → function object. */
async function loadHandlers(path: string): Promise<Handlers> {
  const module = (await import(pathToFileURL(resolve(process.cwd(), path)).href)) as Record<string, unknown>;
  const handlers = (module.default ?? module.handlers) as Handlers | undefined;
  if (!handlers || typeof handlers !== "object" || Object.keys(handlers).length === 0) {
    throw new UsageError(`${path} exports no handlers: use \`export default {"type": fn}\` or \`export const handlers\``);
  }
  for (const [type, fn] of Object.entries(handlers)) {
    if (typeof fn !== "function") {
      throw new UsageError(`${path}: the handler of ${JSON.stringify(type)} is not a function`);
    }
  }
  return handlers;
}

async function main(): Promise<number> {
  let args: Arguments;
  let handlers: Handlers;
  try {
    args = parseArguments(process.argv.slice(2), process.env);
    handlers = await loadHandlers(args.handlers);
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(error.message ? `worker-cli: ${error.message}\n${USAGE}\n` : `${USAGE}\n`);
      return error.message ? 2 : 0;
    }
    throw error;
  }
  const worker = new Worker(handlers, {
    url: args.url,
    token: args.token,
    queues: args.queues,
    concurrency: args.concurrency,
    name: args.name,
    waitMs: args.waitMs,
  });
  try {
    await worker.run();
    return 0;
  } catch (error) {
    process.stderr.write(`worker-cli: ${error instanceof GatewayError ? error.message : String((error as Error)?.stack ?? error)}\n`);
    return 1;
  }
}

main().then(
  // exit() rather than exitCode: fetch's idle keep-alive sockets would hold the
  // process a few seconds more after a stop.
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`worker-cli: ${String((error as Error)?.stack ?? error)}\n`);
    process.exit(1);
  },
);
