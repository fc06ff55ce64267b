package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;

/**
 * A job by jid ({@code GET /sdk/jobs/{jid}}). {@code status} is the stored status,
 * {@code state} one of scheduled, waiting, running, failed, done, cancelled, blocked. Times are
 * ISO 8601 strings; {@code payload} and {@code result} are JSON null for a secure job type.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Job(
        @JsonProperty("jid") String jid,
        @JsonProperty("queue") String queue,
        @JsonProperty("job_type") String jobType,
        @JsonProperty("id") String id,
        @JsonProperty("status") String status,
        @JsonProperty("state") String state,
        @JsonProperty("attempt") int attempt,
        @JsonProperty("max_retry") int maxRetry,
        @JsonProperty("priority") int priority,
        @JsonProperty("secure") boolean secure,
        @JsonProperty("payload") JsonNode payload,
        @JsonProperty("result") JsonNode result,
        @JsonProperty("last_error") ErrorEntry lastError,
        @JsonProperty("cancel_requested") boolean cancelRequested,
        @JsonProperty("run_at") String runAt,
        @JsonProperty("created_at") String createdAt,
        @JsonProperty("started_at") String startedAt,
        @JsonProperty("finished_at") String finishedAt,
        @JsonProperty("expires_at") String expiresAt) {}
