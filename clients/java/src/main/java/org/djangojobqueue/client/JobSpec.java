package org.djangojobqueue.client;

/**
 * One job of a batch ({@link Client#enqueueBatch}).
 *
 * @param jobType the job type, e.g. {@code emails.send}
 * @param payload any JSON-serialisable value (a Map, a List, a JsonNode, a record...), or null
 * @param options its options, or null for the defaults
 */
public record JobSpec(String jobType, Object payload, EnqueueOptions options) {
    /** A job with the default options. */
    public static JobSpec of(String jobType, Object payload) {
        return new JobSpec(jobType, payload, null);
    }
}
