package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.OffsetDateTime;

/**
 * The value and time of an id verb ({@link Ids#add}, {@link Ids#set}, {@link Ids#update}).
 * Fluent: {@code new IdValue().value(Map.of("n", 1)).delay("1m")}.
 */
public final class IdValue {
    private Object value;
    private boolean hasValue;
    private String jobType;
    private String at;
    private Object delay;

    /** The job's value (its payload): any JSON-serialisable value. */
    public IdValue value(Object value) { this.value = value; this.hasValue = true; return this; }

    /** The job type (default: the queue's one job type). */
    public IdValue jobType(String jobType) { this.jobType = jobType; return this; }

    /** When the job runs. Not with {@link #delay}. */
    public IdValue at(OffsetDateTime at) { this.at = at.toString(); return this; }

    /** When the job runs, ISO 8601 with an offset. */
    public IdValue at(String at) { this.at = at; return this; }

    /** Run no sooner than this from now: {@code "500ms"}, {@code "5s"}, {@code "1m"}. */
    public IdValue delay(String delay) { this.delay = delay; return this; }

    /** Run no sooner than this many seconds from now. */
    public IdValue delaySeconds(double seconds) { this.delay = seconds; return this; }

    ObjectNode toJson() {
        ObjectNode body = Json.MAPPER.createObjectNode();
        if (hasValue) {
            body.set("value", Json.MAPPER.valueToTree(value));
        }
        Json.putIf(body, "job_type", jobType);
        Json.putIf(body, "at", at);
        Json.putIf(body, "delay", delay);
        return body;
    }
}
