package org.djangojobqueue.client;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;

/**
 * The answer of an enqueue: {@code status} {@code enqueued} with the new job's jid, or
 * {@code deduplicated} with the jid of the job holding the unique key.
 */
@JsonIgnoreProperties(ignoreUnknown = true)
public record EnqueueResult(@JsonProperty("status") String status, @JsonProperty("jid") String jid) {
    /** Whether a new job was stored (false: deduplicated). */
    public boolean enqueued() {
        return "enqueued".equals(status);
    }
}
