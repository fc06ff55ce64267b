package org.djangojobqueue.client;

/**
 * Throw it from a handler to dead-letter the job at once: the worker reports the attempt
 * failed with {@code retry: false}. Any other exception is retried (backoff, then dead
 * letter past the job's {@code max_retry}).
 */
public class PermanentFailure extends Exception {
    private static final long serialVersionUID = 1L;

    public PermanentFailure(String message) {
        super(message);
    }

    public PermanentFailure(String message, Throwable cause) {
        super(message, cause);
    }
}
