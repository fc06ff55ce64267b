package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A worker loop over the gateway's worker protocol (docs/gateway.md, "The worker protocol"):
 * register, long-poll claims for up to {@code concurrency} jobs at once, run each on an
 * executor thread, heartbeat it every {@code heartbeat_ms}, report {@code complete} or
 * {@code fail}, and on {@link #stop()} (or SIGTERM) stop claiming, let the running jobs
 * finish and be reported, then mark the worker stopped.
 *
 * <pre>{@code
 * Worker worker = new Worker(client, Map.of("emails.send", (payload, ctx) -> Map.of("sent", true)),
 *         new Worker.Options(List.of("emails")).concurrency(4));
 * Worker.Stats stats = worker.run(); // blocks until SIGTERM or stop()
 * }</pre>
 *
 * <ul>
 *   <li>A returned value is the job's result ({@code complete}).
 *   <li>A thrown {@link PermanentFailure} is reported with {@code retry: false} (dead letter
 *       now); any other exception with {@code retry: true}; {@code exception_class} is the
 *       exception's class name.
 *   <li>A heartbeat answering {@code cancel_requested} sets {@link JobContext#cancelRequested()}
 *       and interrupts the handler; a handler that then throws is reported {@code cancelled}.
 *   <li>Past the job's {@code timeout_ms} the attempt is reported failed
 *       ({@code java.util.concurrent.TimeoutException}) and the handler interrupted.
 *   <li>A {@code 409 lease_lost} (heartbeat or report) drops the outcome.
 *   <li>An unreachable gateway, a 503 or a 429 is retried with backoff; any other refusal of
 *       the registration or a claim (401, 403...) ends {@link #run()} with that exception,
 *       once the running jobs are reported.
 * </ul>
 *
 * <p>With {@link Options#handleSignals} (the default) SIGTERM and SIGINT stop the worker:
 * {@link #run()} returns once the running jobs are reported, and the process exits 0 when
 * {@code main} returns. A claim in flight is not abandoned: a stop waits for it (at most
 * {@code waitMs}) and runs the jobs it brought.
 */
public final class Worker {
    /** A job handler: its return value (any JSON-serialisable value, or null) is the job's result. */
    @FunctionalInterface
    public interface Handler {
        Object handle(JsonNode payload, JobContext ctx) throws Exception;
    }

    /** A worker's options; the queues are required. */
    public static final class Options {
        private final List<String> queues;
        private int concurrency = 1;
        private String name;
        private long waitMs = 5_000;
        private Long leaseMs;
        private Long heartbeatMs;
        private boolean handleSignals = true;

        /** @param queues the queues to claim from (at least one) */
        public Options(List<String> queues) {
            if (queues == null || queues.isEmpty()) {
                throw new IllegalArgumentException("Worker: queues must name at least one queue");
            }
            this.queues = List.copyOf(queues);
        }

        /** Jobs run at once, 1..100 (default 1). */
        public Options concurrency(int concurrency) {
            if (concurrency < 1 || concurrency > 100) {
                throw new IllegalArgumentException("Worker: concurrency must be 1..100, got " + concurrency);
            }
            this.concurrency = concurrency;
            return this;
        }

        /** The registered name (default {@code <host>-<pid>-java}). */
        public Options name(String name) { this.name = name; return this; }

        /** A claim's long-poll, ms (default 5000; the gateway caps it at its {@code max_wait_ms}). */
        public Options waitMs(long waitMs) { this.waitMs = waitMs; return this; }

        /** The lease asked for by each claim and heartbeat, ms (default: the site's {@code LEASE_MS}). */
        public Options leaseMs(long leaseMs) { this.leaseMs = leaseMs; return this; }

        /** The heartbeat interval, ms (default: the registration's {@code heartbeat_ms}). */
        public Options heartbeatMs(long heartbeatMs) { this.heartbeatMs = heartbeatMs; return this; }

        /** Stop gracefully on SIGTERM and SIGINT (default true). */
        public Options handleSignals(boolean handleSignals) { this.handleSignals = handleSignals; return this; }
    }

    /** The counts of one run. {@code leaseLost}: outcomes dropped on 409 {@code lease_lost}. */
    public record Stats(long claimed, long done, long failed, long cancelled, long leaseLost) {}

    private static final Logger LOG = Logger.getLogger(Worker.class.getName());
    private static final int MAX_ERROR = 10_000;

    private final Client client;
    private final Map<String, Handler> handlers;
    private final Options options;
    private final String name;
    private final AtomicBoolean started = new AtomicBoolean();
    private final AtomicBoolean stopping = new AtomicBoolean();
    private final CountDownLatch finished = new CountDownLatch(1);
    private final Semaphore slots;
    private final AtomicInteger unreported = new AtomicInteger();
    private final Object drained = new Object();
    private final AtomicLong claimed = new AtomicLong();
    private final AtomicLong done = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private final AtomicLong cancelled = new AtomicLong();
    private final AtomicLong leaseLost = new AtomicLong();
    private final Object loopLock = new Object();
    private Thread loopThread;
    private boolean waitingForSlot;
    private ExecutorService executor;
    private ScheduledExecutorService scheduler;
    private long heartbeatMs;

    /**
     * @param client the gateway client (its token needs the {@code work} scope on the queues)
     * @param handlers job type to handler; the worker claims only these types
     * @param options the queues and the rest
     * @throws IllegalArgumentException when no handler is given
     */
    public Worker(Client client, Map<String, Handler> handlers, Options options) {
        if (handlers == null || handlers.isEmpty() || handlers.values().stream().anyMatch(h -> h == null)) {
            throw new IllegalArgumentException("Worker: handlers must map at least one job type to a handler");
        }
        this.client = client;
        this.handlers = new LinkedHashMap<>(handlers);
        this.options = options;
        this.name = options.name != null ? options.name : hostname() + "-" + ProcessHandle.current().pid() + "-java";
        this.slots = new Semaphore(options.concurrency);
    }

    /** The name the worker registers under. */
    public String name() {
        return name;
    }

    /** Whether {@link #stop()} was called (or a signal came). */
    public boolean stopping() {
        return stopping.get();
    }

    /** The counts so far. */
    public Stats stats() {
        return new Stats(claimed.get(), done.get(), failed.get(), cancelled.get(), leaseLost.get());
    }

    /** Stop claiming; {@link #run()} returns once the running jobs have been reported. Idempotent. */
    public void stop() {
        if (stopping.compareAndSet(false, true)) {
            LOG.info("stopping: " + unreported.get() + " running job(s) finish first");
            // A claim in flight is not abandoned (its jobs would stay leased to no one until
            // their lease expired): it ends within wait_ms and its jobs run. Only a loop
            // waiting for a free slot is woken.
            synchronized (loopLock) {
                if (waitingForSlot && loopThread != null && loopThread != Thread.currentThread()) {
                    loopThread.interrupt();
                }
            }
        }
    }

    /**
     * Register, then claim and run jobs until {@link #stop()} (or SIGTERM/SIGINT).
     *
     * @return the run's counts, once every running job has been reported
     * @throws GatewayException when the gateway refuses the registration or a claim (401, 403...)
     * @throws IllegalStateException when called twice
     */
    public Stats run() {
        if (!started.compareAndSet(false, true)) {
            throw new IllegalStateException("Worker.run() was already called");
        }
        synchronized (loopLock) {
            loopThread = Thread.currentThread();
        }
        Runnable restoreSignals = null;
        Thread hook = null;
        if (options.handleSignals) {
            restoreSignals = Signals.install(() -> {
                LOG.info("signal received");
                stop();
            });
            if (restoreSignals == null) {
                hook = new Thread(() -> {
                    LOG.info("shutdown signal received");
                    stop();
                    try {
                        finished.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }, "jobqueue-worker-shutdown");
                Runtime.getRuntime().addShutdownHook(hook);
            }
        }
        executor = Executors.newCachedThreadPool(threads("jobqueue-job"));
        scheduler = Executors.newScheduledThreadPool(Math.min(options.concurrency, 8) + 1, threads("jobqueue-heartbeat"));
        boolean registered = false;
        boolean clean = false;
        try {
            Registration registration = retrying(() -> client.register(new RegisterOptions(name, options.queues)
                    .host(hostname())
                    .pid(ProcessHandle.current().pid())
                    .languages(List.of("java"))
                    .jobTypes(new ArrayList<>(handlers.keySet()))
                    .concurrency(options.concurrency)
                    .version(Client.VERSION)));
            if (registration != null) {
                registered = true;
                heartbeatMs = options.heartbeatMs != null ? options.heartbeatMs : registration.heartbeatMs();
                long waitMs = Math.min(options.waitMs, registration.maxWaitMs());
                LOG.info("registered " + name + ": queues=" + String.join(",", options.queues)
                        + " job_types=" + String.join(",", handlers.keySet()) + " concurrency=" + options.concurrency);
                loop(waitMs);
            }
            clean = true;
        } finally {
            synchronized (loopLock) {
                loopThread = null;
            }
            Thread.interrupted(); // stop()'s wake-up of the loop, not meant for the drain
            awaitReported();
            if (clean && registered) {
                try {
                    // Gone from the console and `jobqueue status` at once, not three heartbeats later.
                    client.stopWorker(name);
                } catch (GatewayException e) {
                    LOG.warning("could not report the stop of " + name + ": " + e.getMessage());
                }
            }
            executor.shutdown();
            scheduler.shutdownNow();
            if (restoreSignals != null) {
                restoreSignals.run();
            }
            if (hook != null) {
                try {
                    Runtime.getRuntime().removeShutdownHook(hook);
                } catch (IllegalStateException e) {
                    // The JVM is shutting down: the hook is running and waits for `finished`.
                }
            }
            Stats s = stats();
            LOG.info("stopped: claimed=" + s.claimed() + " done=" + s.done() + " failed=" + s.failed()
                    + " cancelled=" + s.cancelled() + " lease_lost=" + s.leaseLost());
            finished.countDown();
        }
        return stats();
    }

    private void loop(long waitMs) {
        List<String> jobTypes = new ArrayList<>(handlers.keySet());
        while (!stopping.get()) {
            synchronized (loopLock) {
                if (stopping.get()) {
                    break;
                }
                waitingForSlot = true;
            }
            boolean acquired = false;
            try {
                slots.acquire();
                acquired = true;
            } catch (InterruptedException e) {
                // stop() woke us
            } finally {
                synchronized (loopLock) {
                    waitingForSlot = false;
                }
                Thread.interrupted(); // no interrupt comes after this: stop() sends one only while waiting
            }
            if (!acquired) {
                continue;
            }
            int free = 1 + slots.drainPermits();
            ClaimOptions claim = new ClaimOptions(options.queues).jobTypes(jobTypes).limit(free)
                    .waitMs(waitMs).worker(name);
            if (options.leaseMs != null) {
                claim.leaseMs(options.leaseMs);
            }
            List<ClaimedJob> jobs;
            try {
                jobs = retrying(() -> client.claim(claim));
            } catch (RuntimeException e) {
                slots.release(free);
                throw e;
            }
            int got = jobs == null ? 0 : jobs.size();
            slots.release(free - got);
            if (jobs != null) {
                for (ClaimedJob job : jobs) {
                    claimed.incrementAndGet();
                    unreported.incrementAndGet();
                    executor.execute(() -> execute(job));
                }
            }
        }
    }

    /** Call {@code fn} until it answers; back off on an unreachable gateway, 503 or 429. Null once stopping. */
    private <T> T retrying(Supplier<T> fn) {
        long backoff = 500;
        while (!stopping.get()) {
            try {
                return fn.get();
            } catch (GatewayException e) {
                if (!e.isRetryable()) {
                    throw e;
                }
                long wait = e.retryAfter() != null ? (long) (e.retryAfter() * 1000) : backoff;
                LOG.warning(e.getMessage() + "; trying again in " + wait + " ms");
                long until = System.nanoTime() + wait * 1_000_000L;
                while (!stopping.get() && System.nanoTime() < until) {
                    try {
                        Thread.sleep(Math.min(100, wait));
                    } catch (InterruptedException interrupted) {
                        return null;
                    }
                }
                backoff = Math.min(backoff * 2, 10_000);
            }
        }
        return null;
    }

    /** Run one claimed job and report it; never throws. */
    private void execute(ClaimedJob job) {
        JobContext ctx = new JobContext(job, client);
        AtomicBoolean reported = new AtomicBoolean();
        ctx.started(Thread.currentThread());
        ScheduledFuture<?> beat = scheduler.scheduleAtFixedRate(() -> heartbeat(job, ctx), heartbeatMs, heartbeatMs,
                TimeUnit.MILLISECONDS);
        ScheduledFuture<?> timer = scheduler.schedule(() -> {
            if (reported.compareAndSet(false, true)) {
                beat.cancel(false);
                ctx.interruptHandler();
                executor.execute(() -> {
                    try {
                        reportFailure(job, ctx, "timed out after " + job.timeoutMs() + " ms",
                                "java.util.concurrent.TimeoutException", true);
                    } finally {
                        reportedOne();
                    }
                });
            }
        }, Math.max(1, job.timeoutMs()), TimeUnit.MILLISECONDS);
        Object result = null;
        Throwable error = null;
        try {
            Handler handler = handlers.get(job.jobType());
            if (handler == null) {
                throw new IllegalStateException("no handler for job type " + job.jobType());
            }
            result = handler.handle(job.payload(), ctx);
        } catch (Throwable e) { // NOPMD: a handler's every failure is the job's outcome
            error = e;
        } finally {
            ctx.finished();
            beat.cancel(false);
            timer.cancel(false);
        }
        if (!reported.compareAndSet(false, true)) {
            return; // timed out: reported already
        }
        try {
            if (ctx.leaseLost()) {
                dropped(job);
            } else if (error == null) {
                Object value = result;
                report(() -> client.complete(job.jid(), job.leaseToken(), value));
                done.incrementAndGet();
            } else {
                String message = error.getMessage() != null ? error.getMessage() : error.getClass().getSimpleName();
                reportFailure(job, ctx, message, error.getClass().getName(), !(error instanceof PermanentFailure));
            }
        } catch (GatewayException.LeaseLost e) {
            dropped(job);
        } catch (RuntimeException e) {
            LOG.log(Level.SEVERE, "report of " + job.jid() + " failed: " + e.getMessage(), e);
        } finally {
            reportedOne();
        }
    }

    private void reportFailure(ClaimedJob job, JobContext ctx, String message, String exceptionClass, boolean retry) {
        boolean wasCancelled = ctx.cancelRequested();
        FailOptions fail = new FailOptions()
                .error(message.length() > MAX_ERROR ? message.substring(0, MAX_ERROR) : message)
                .exceptionClass(exceptionClass.length() > 200 ? exceptionClass.substring(0, 200) : exceptionClass)
                .retry(retry)
                .cancelled(wasCancelled);
        try {
            String status = report(() -> client.fail(job.jid(), job.leaseToken(), fail));
            (wasCancelled ? cancelled : failed).incrementAndGet();
            LOG.warning("job " + job.jid() + " (" + job.jobType() + ") failed: " + exceptionClass + "; stored " + status);
        } catch (GatewayException.LeaseLost e) {
            dropped(job);
        } catch (RuntimeException e) {
            LOG.log(Level.SEVERE, "report of " + job.jid() + " failed: " + e.getMessage(), e);
        }
    }

    private void heartbeat(ClaimedJob job, JobContext ctx) {
        try {
            if (client.heartbeat(job.jid(), job.leaseToken(), options.leaseMs)) {
                ctx.requestCancel();
            }
        } catch (GatewayException.LeaseLost e) {
            ctx.loseLease();
            throw new CancellationException("lease lost"); // ends this job's heartbeats
        } catch (GatewayException e) {
            LOG.warning("heartbeat of " + job.jid() + " failed: " + e.getMessage());
        }
    }

    /** A report, retried while the gateway is unreachable, 503 or 429 (the lease bounds this). */
    private <T> T report(Supplier<T> fn) {
        long backoff = 250;
        for (int tries = 1; ; tries++) {
            try {
                return fn.get();
            } catch (GatewayException e) {
                if (!e.isRetryable() || tries >= 8) {
                    throw e;
                }
                long wait = e.retryAfter() != null ? (long) (e.retryAfter() * 1000) : backoff;
                try {
                    Thread.sleep(wait);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                    throw e;
                }
                backoff = Math.min(backoff * 2, 5_000);
            }
        }
    }

    private void dropped(ClaimedJob job) {
        leaseLost.incrementAndGet();
        LOG.warning("job " + job.jid() + " (" + job.jobType() + "): lease lost, outcome dropped");
    }

    private void reportedOne() {
        slots.release();
        if (unreported.decrementAndGet() == 0) {
            synchronized (drained) {
                drained.notifyAll();
            }
        }
    }

    private void awaitReported() {
        synchronized (drained) {
            while (unreported.get() > 0) {
                try {
                    drained.wait(1_000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }

    private static ThreadFactory threads(String prefix) {
        AtomicInteger count = new AtomicInteger();
        return runnable -> {
            Thread thread = new Thread(runnable, prefix + "-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    private static String hostname() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            String env = System.getenv("HOSTNAME");
            return env != null ? env : "localhost";
        }
    }
}
