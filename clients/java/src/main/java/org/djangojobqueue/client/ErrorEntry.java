package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;

/**
 * A failed attempt, as {@link Job#lastError()} shows it: {@code message} reads
 * {@code <ExceptionClass>: <error>}; {@code at} is ISO 8601.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record ErrorEntry(
        @JsonProperty("attempt") Integer attempt,
        @JsonProperty("message") String message,
        @JsonProperty("exception_class") String exceptionClass,
        @JsonProperty("at") String at) {}
