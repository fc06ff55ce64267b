package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;

/** What a registered worker should use: its lease, heartbeat interval and longest claim wait, ms. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Registration(
        @JsonProperty("name") String name,
        @JsonProperty("lease_ms") long leaseMs,
        @JsonProperty("heartbeat_ms") long heartbeatMs,
        @JsonProperty("max_wait_ms") long maxWaitMs) {}
