package org.djangojobqueue.conformance;

/** A scenario that did not hold (or could not be read): its reason is the report's. */
final class ScenarioError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    ScenarioError(String message) {
        super(message);
    }
}
