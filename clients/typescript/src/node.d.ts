// The few Node 20 APIs this package uses, declared here so that its one dev
// dependency is `typescript` (no @types/node). fetch, AbortController, URL,
// setTimeout and console come from the DOM lib, which Node 20 implements.

declare const process: {
  readonly env: Record<string, string | undefined>;
  readonly argv: string[];
  readonly pid: number;
  exitCode: number | undefined;
  exit(code?: number): never;
  cwd(): string;
  on(event: "SIGTERM" | "SIGINT", listener: (signal: string) => void): unknown;
  off(event: "SIGTERM" | "SIGINT", listener: (signal: string) => void): unknown;
  readonly stderr: { write(text: string): boolean };
};

declare module "node:os" {
  export function hostname(): string;
}

declare module "node:path" {
  export function resolve(...paths: string[]): string;
}

declare module "node:url" {
  export function pathToFileURL(path: string): URL;
}
