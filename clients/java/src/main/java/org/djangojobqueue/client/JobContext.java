package org.djangojobqueue.client;

/**
 * What a handler knows of its job beside the payload. {@link #cancelRequested()} turns
 * true once a heartbeat answers {@code cancel_requested} (the handler's thread is then
 * interrupted too): stop and throw, and the attempt is reported cancelled.
 */
public final class JobContext {
    private final ClaimedJob job;
    private final Client client;
    private volatile boolean cancelRequested;
    private volatile boolean leaseLost;
    private Thread runner;
    private boolean handlerDone;

    JobContext(ClaimedJob job, Client client) {
        this.job = job;
        this.client = client;
        this.cancelRequested = job.cancelRequested();
    }

    public String jid() { return job.jid(); }

    public String queue() { return job.queue(); }

    public String jobType() { return job.jobType(); }

    /** The id the job holds, or null. */
    public String id() { return job.id(); }

    /** 1 on the first run. */
    public int attempt() { return job.attempt(); }

    public int maxRetry() { return job.maxRetry(); }

    /** The attempt's time limit, ms: past it the attempt is reported failed and the handler interrupted. */
    public long timeoutMs() { return job.timeoutMs(); }

    /** True once the job was asked to stop: throw (any exception) and it is reported cancelled. */
    public boolean cancelRequested() { return cancelRequested; }

    /** True once the lease was lost (409 {@code lease_lost}): the outcome will be dropped. */
    public boolean leaseLost() { return leaseLost; }

    /** The raw claimed job. */
    public ClaimedJob job() { return job; }

    /** The worker's client, to enqueue follow-up jobs from the handler. */
    public Client client() { return client; }

    void requestCancel() {
        if (!cancelRequested) {
            cancelRequested = true;
            interruptHandler();
        }
    }

    void loseLease() {
        leaseLost = true;
        interruptHandler();
    }

    synchronized void started(Thread thread) {
        runner = thread;
    }

    /** Called by the handler's thread when the handler returned; clears a late interrupt. */
    synchronized void finished() {
        handlerDone = true;
        Thread.interrupted();
    }

    /** Interrupt the handler's thread while it still runs this job (never the thread's next job). */
    synchronized void interruptHandler() {
        if (runner != null && !handlerDone) {
            runner.interrupt();
        }
    }
}
