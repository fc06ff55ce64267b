package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * A failed attempt's report: its message, its exception class (stored as the attempt's
 * {@code exception_class}; the stored message reads {@code <LastPart>: <error>}), whether
 * to retry it (false: dead letter at once), and whether it stopped on a cancel request.
 */
public final class FailOptions {
    private String error;
    private String exceptionClass;
    private Boolean retry;
    private Boolean cancelled;

    public FailOptions error(String error) { this.error = error; return this; }

    /** E.g. {@code java.lang.IllegalStateException}, or {@code billing.CardDeclined}. */
    public FailOptions exceptionClass(String exceptionClass) { this.exceptionClass = exceptionClass; return this; }

    /** false: dead-letter at once (default true: backoff, then dead letter past max_retry). */
    public FailOptions retry(boolean retry) { this.retry = retry; return this; }

    /** true: the handler stopped on a cancel request. */
    public FailOptions cancelled(boolean cancelled) { this.cancelled = cancelled; return this; }

    void writeTo(ObjectNode body) {
        Json.putIf(body, "error", error);
        Json.putIf(body, "exception_class", exceptionClass);
        Json.putIf(body, "retry", retry);
        Json.putIf(body, "cancelled", cancelled);
    }
}
