package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;

/** {@code cancelled}: a waiting job was stopped; {@code cancelRequested}: a running one was asked to. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record CancelResult(
        @JsonProperty("cancelled") boolean cancelled,
        @JsonProperty("cancel_requested") boolean cancelRequested) {}
