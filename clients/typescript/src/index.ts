/**
 * @django-jobqueue/client: the TypeScript client of django-jobqueue's HTTP SDK
 * gateway. Zero runtime dependencies: Node 20's global fetch.
 */

export * from "./client.js";
export * from "./errors.js";
export * from "./worker.js";
export * from "./workflows.js";
