package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;
import java.util.List;

/** A page of {@link Ids#list}; {@code next} is the following page's cursor, or null. */
@JsonIgnoreProperties(ignoreUnknown = true)
public record Page(@JsonProperty("jobs") List<IdJob> jobs, @JsonProperty("next") String next) {}
