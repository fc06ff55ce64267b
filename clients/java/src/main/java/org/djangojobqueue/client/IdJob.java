package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.databind.JsonNode;

/**
 * A job as the id verbs' {@code get} and {@code list} show it: its id, value, state and
 * time ({@code at}, ISO 8601), and its jid.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record IdJob(
        @JsonProperty("id") String id,
        @JsonProperty("value") JsonNode value,
        @JsonProperty("state") String state,
        @JsonProperty("at") String at,
        @JsonProperty("attempt") int attempt,
        @JsonProperty("jid") String jid,
        @JsonProperty("queue") String queue,
        @JsonProperty("job_type") String jobType,
        @JsonProperty("priority") int priority,
        @JsonProperty("max_retry") int maxRetry,
        @JsonProperty("result") JsonNode result,
        @JsonProperty("message") String message,
        @JsonProperty("cancel_requested") boolean cancelRequested,
        @JsonProperty("created_at") String createdAt,
        @JsonProperty("started_at") String startedAt,
        @JsonProperty("finished_at") String finishedAt) {}
