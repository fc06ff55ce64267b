package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;

/**
 * A claimed job: run it, heartbeat it, and report on it with its {@code leaseToken}.
 * {@code timeoutMs} bounds one attempt, ms; {@code attempt} is 1 on the first run.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record ClaimedJob(
        @JsonProperty("jid") String jid,
        @JsonProperty("queue") String queue,
        @JsonProperty("job_type") String jobType,
        @JsonProperty("id") String id,
        @JsonProperty("payload") JsonNode payload,
        @JsonProperty("attempt") int attempt,
        @JsonProperty("max_retry") int maxRetry,
        @JsonProperty("priority") int priority,
        @JsonProperty("timeout_ms") long timeoutMs,
        @JsonProperty("lease_token") String leaseToken,
        @JsonProperty("lease_expires_at") String leaseExpiresAt,
        @JsonProperty("cancel_requested") boolean cancelRequested) {}
