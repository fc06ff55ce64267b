package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.OffsetDateTime;
import java.util.List;

/**
 * The options of one job, as {@code enqueue_job} takes them (docs/gateway.md, "JobIn");
 * every one left unset is the gateway's default. Fluent:
 * {@code new EnqueueOptions().queue("emails").priority(1).delay("5s").maxRetry(3)}.
 */
public final class EnqueueOptions {
    private String queue;
    private Integer priority;
    private Object delay;
    private String runAt;
    private Long expiresMs;
    private Long timeoutMs;
    private Integer maxRetry;
    private String uniqueKey;
    private String uniqueMode;
    private Long uniqueTtlMs;
    private String id;
    private String limitKey;
    private Long batch;
    private List<String> after;
    private String onUpstreamFailure;

    /** The queue (default: the job type's, else {@code default}). */
    public EnqueueOptions queue(String queue) { this.queue = queue; return this; }

    /** 1 runs first. */
    public EnqueueOptions priority(int priority) { this.priority = priority; return this; }

    /** Run no sooner than this from now: {@code "500ms"}, {@code "5s"}, {@code "1m"}. Not with {@link #runAt}. */
    public EnqueueOptions delay(String delay) { this.delay = delay; return this; }

    /** Run no sooner than this many seconds from now. Not with {@link #runAt}. */
    public EnqueueOptions delaySeconds(double seconds) { this.delay = seconds; return this; }

    /** Run no sooner than this time. Not with {@link #delay}. */
    public EnqueueOptions runAt(OffsetDateTime at) { this.runAt = at.toString(); return this; }

    /** Run no sooner than this time, ISO 8601 with an offset. */
    public EnqueueOptions runAt(String at) { this.runAt = at; return this; }

    /** Dead-letter the job if it is not claimed within this many ms of its run time. */
    public EnqueueOptions expiresMs(long ms) { this.expiresMs = ms; return this; }

    /** One attempt's time limit, ms. */
    public EnqueueOptions timeoutMs(long ms) { this.timeoutMs = ms; return this; }

    /** Retries after the first attempt (0: none). */
    public EnqueueOptions maxRetry(int maxRetry) { this.maxRetry = maxRetry; return this; }

    /** A second job with this key (while the first holds it) is deduplicated to the first. */
    public EnqueueOptions uniqueKey(String key) { this.uniqueKey = key; return this; }

    /** {@code while_locked}, or (Pro) {@code until_executing}, {@code until_executed}. */
    public EnqueueOptions uniqueMode(String mode) { this.uniqueMode = mode; return this; }

    /** How long the unique key is held at most, ms. */
    public EnqueueOptions uniqueTtlMs(long ms) { this.uniqueTtlMs = ms; return this; }

    /** An id the job holds; a held id is a {@link GatewayException.DuplicateJob}. */
    public EnqueueOptions id(String id) { this.id = id; return this; }

    /** The key a partitioned limit counts the job under (docs/limits.md). */
    public EnqueueOptions limitKey(String key) { this.limitKey = key; return this; }

    /** An open batch's id the job joins (docs/workflows.md); {@link Client#enqueue} only, not a batch. */
    public EnqueueOptions batch(long batchId) { this.batch = batchId; return this; }

    /**
     * The jids the job waits for (docs/workflows.md): it is {@code blocked} until each is done.
     * {@link Client#enqueue} only, not a batch.
     */
    public EnqueueOptions after(List<String> jids) { this.after = List.copyOf(jids); return this; }

    /** What an upstream job's death does to it: {@code cancel} (default), {@code skip} or {@code ignore}; with {@link #after}. */
    public EnqueueOptions onUpstreamFailure(String policy) { this.onUpstreamFailure = policy; return this; }

    /** Write the options that are set into {@code body}, in the gateway's names. */
    void writeTo(ObjectNode body) {
        Json.putIf(body, "queue", queue);
        Json.putIf(body, "priority", priority);
        Json.putIf(body, "delay", delay);
        Json.putIf(body, "run_at", runAt);
        Json.putIf(body, "expires_ms", expiresMs);
        Json.putIf(body, "timeout_ms", timeoutMs);
        Json.putIf(body, "max_retry", maxRetry);
        Json.putIf(body, "unique_key", uniqueKey);
        Json.putIf(body, "unique_mode", uniqueMode);
        Json.putIf(body, "unique_ttl_ms", uniqueTtlMs);
        Json.putIf(body, "id", id);
        Json.putIf(body, "limit_key", limitKey);
        Json.putIf(body, "batch", batch);
        Json.putIf(body, "after", after);
        Json.putIf(body, "on_upstream_failure", onUpstreamFailure);
    }
}
