package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;

/**
 * A claim: up to {@code limit} due jobs of these queues (and job types), waiting up to
 * {@code waitMs} for one. Fluent: {@code new ClaimOptions(List.of("node")).limit(4).waitMs(5000)}.
 */
public final class ClaimOptions {
    private final List<String> queues;
    private List<String> jobTypes;
    private Integer limit;
    private Long waitMs;
    private String worker;
    private Long leaseMs;

    /** @param queues the queues to claim from (at least one) */
    public ClaimOptions(List<String> queues) {
        this.queues = List.copyOf(queues);
    }

    /** Only these job types (empty or unset: any type). */
    public ClaimOptions jobTypes(List<String> jobTypes) { this.jobTypes = List.copyOf(jobTypes); return this; }

    /** 1..100 (default 1). */
    public ClaimOptions limit(int limit) { this.limit = limit; return this; }

    /** How long to wait for a job, 0..30000 ms (default 0). */
    public ClaimOptions waitMs(long waitMs) { this.waitMs = waitMs; return this; }

    /** The registered worker's name. */
    public ClaimOptions worker(String worker) { this.worker = worker; return this; }

    /** The lease, ms (default: the site's {@code LEASE_MS}). */
    public ClaimOptions leaseMs(long leaseMs) { this.leaseMs = leaseMs; return this; }

    long waitMsOrZero() {
        return waitMs == null ? 0 : waitMs;
    }

    ObjectNode toJson() {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.set("queues", Json.MAPPER.valueToTree(queues));
        Json.putIf(body, "job_types", jobTypes);
        Json.putIf(body, "limit", limit);
        Json.putIf(body, "wait_ms", waitMs);
        Json.putIf(body, "worker", worker);
        Json.putIf(body, "lease_ms", leaseMs);
        return body;
    }
}
