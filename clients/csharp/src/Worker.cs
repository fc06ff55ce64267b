using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Json;
using System.Linq;
using System.Net;
using System.Threading;
using System.Threading.Tasks;

namespace DjangoJobQueue.Client
{
    /// <summary>A job handler: its result (any JSON value, or null) is the job's result.</summary>
    public delegate Task<JsonValue> JobHandler(JsonValue payload, JobContext ctx);

    /// <summary>Throw it from a handler to dead-letter the job at once (<c>retry: false</c>).</summary>
    public class PermanentFailureException : Exception
    {
        public PermanentFailureException(string message) : base(message) { }
        public PermanentFailureException(string message, Exception inner) : base(message, inner) { }
    }

    /// <summary>What a handler knows of its job beside the payload.</summary>
    public sealed class JobContext
    {
        readonly CancellationTokenSource stop = new CancellationTokenSource();
        int cancelRequested;
        int leaseLost;

        internal JobContext(ClaimedJob job, JobQueueClient client)
        {
            Job = job;
            Client = client;
            if (job.CancelRequested) RequestCancel();
        }

        public string Jid { get { return Job.Jid; } }
        public string Queue { get { return Job.Queue; } }
        public string JobType { get { return Job.JobType; } }
        /// <summary>The id the job holds, or null.</summary>
        public string Id { get { return Job.Id; } }
        /// <summary>1 on the first run.</summary>
        public long Attempt { get { return Job.Attempt; } }
        public long MaxRetry { get { return Job.MaxRetry; } }
        /// <summary>The attempt's time limit, ms: past it the attempt is reported failed.</summary>
        public long TimeoutMs { get { return Job.TimeoutMs; } }
        /// <summary>True once a heartbeat answered <c>cancel_requested</c>: throw, and the attempt is reported cancelled.</summary>
        public bool CancelRequested { get { return Volatile.Read(ref cancelRequested) == 1; } }
        /// <summary>True once the lease was lost (409 <c>lease_lost</c>): the outcome will be dropped.</summary>
        public bool LeaseLost { get { return Volatile.Read(ref leaseLost) == 1; } }
        /// <summary>Cancelled on a cancel request, a lost lease, or the job's timeout.</summary>
        public CancellationToken Token { get { return stop.Token; } }
        /// <summary>The raw claimed job.</summary>
        public ClaimedJob Job { get; private set; }
        /// <summary>The worker's client, to enqueue follow-up jobs from the handler.</summary>
        public JobQueueClient Client { get; private set; }

        internal void RequestCancel()
        {
            if (Interlocked.Exchange(ref cancelRequested, 1) == 0) Abort();
        }

        internal void LoseLease()
        {
            Interlocked.Exchange(ref leaseLost, 1);
            Abort();
        }

        internal void Abort()
        {
            try { stop.Cancel(); } catch (ObjectDisposedException) { }
        }
    }

    /// <summary>A worker's options; <c>Queues</c> is required.</summary>
    public sealed class WorkerOptions
    {
        public WorkerOptions()
        {
            Concurrency = 1;
            WaitMs = 5000;
            HandleSignals = true;
            Log = line => Console.Error.WriteLine("jobqueue-worker: " + line);
        }

        /// <summary>The queues to claim from (at least one).</summary>
        public IList<string> Queues { get; set; }
        /// <summary>Jobs run at once, 1..100 (default 1).</summary>
        public int Concurrency { get; set; }
        /// <summary>The registered name (default <c>&lt;host&gt;-&lt;pid&gt;-csharp</c>).</summary>
        public string Name { get; set; }
        /// <summary>A claim's long-poll, ms (default 5000; capped by the gateway's <c>max_wait_ms</c>).</summary>
        public long WaitMs { get; set; }
        /// <summary>The lease asked for by each claim and heartbeat, ms (default: the site's <c>LEASE_MS</c>).</summary>
        public long? LeaseMs { get; set; }
        /// <summary>The heartbeat interval, ms (default: the registration's <c>heartbeat_ms</c>).</summary>
        public long? HeartbeatMs { get; set; }
        /// <summary>Stop gracefully on SIGTERM and SIGINT (default true; Mono.Posix).</summary>
        public bool HandleSignals { get; set; }
        /// <summary>Where the worker's lines go (default: stderr, prefixed <c>jobqueue-worker: </c>).</summary>
        public Action<string> Log { get; set; }
    }

    /// <summary>The counts of one run; <c>LeaseLost</c>: outcomes dropped on 409 <c>lease_lost</c>.</summary>
    public sealed class WorkerStats
    {
        internal long claimed, done, failed, cancelled, leaseLost;
        public long Claimed { get { return Interlocked.Read(ref claimed); } }
        public long Done { get { return Interlocked.Read(ref done); } }
        public long Failed { get { return Interlocked.Read(ref failed); } }
        public long Cancelled { get { return Interlocked.Read(ref cancelled); } }
        public long LeaseLost { get { return Interlocked.Read(ref leaseLost); } }

        public override string ToString()
        {
            return string.Format("claimed={0} done={1} failed={2} cancelled={3} lease_lost={4}", Claimed, Done, Failed, Cancelled, LeaseLost);
        }
    }

    /// <summary>
    /// A worker loop over the gateway's worker protocol (docs/gateway.md, "The worker protocol"):
    /// register, long-poll claims for up to <c>Concurrency</c> jobs at once, run each handler as
    /// a task with a heartbeat every <c>heartbeat_ms</c>, report <c>complete</c> or <c>fail</c>,
    /// and on <see cref="Stop"/> (or SIGTERM/SIGINT) stop claiming, let the running jobs finish
    /// and be reported, then mark the worker stopped. A claim in flight is not abandoned: a
    /// stop waits for it (at most <c>WaitMs</c>) and runs the jobs it brought.
    /// </summary>
    /// <remarks>
    /// A handler's result is reported <c>complete</c>; a thrown <see cref="PermanentFailureException"/>
    /// is reported with <c>retry: false</c> (dead letter now), any other exception with
    /// <c>retry: true</c>, its class's full name as <c>exception_class</c>. A heartbeat answering
    /// <c>cancel_requested</c> sets <see cref="JobContext.CancelRequested"/> and cancels
    /// <see cref="JobContext.Token"/>; an exception after it is reported cancelled. Past the job's
    /// <c>timeout_ms</c> the attempt is reported failed (<c>System.TimeoutException</c>) and its
    /// token cancelled. A 409 <c>lease_lost</c> drops the outcome. An unreachable gateway, a 503
    /// or a 429 is retried with backoff; any other refusal of the registration or a claim (401,
    /// 403...) ends <see cref="RunAsync"/> with it, once the running jobs are reported.
    /// </remarks>
    public sealed class Worker
    {
        const int MaxError = 10000;

        readonly JobQueueClient client;
        readonly Dictionary<string, JobHandler> handlers;
        readonly WorkerOptions options;
        readonly CancellationTokenSource stopping = new CancellationTokenSource();
        readonly ConcurrentDictionary<string, Task> running = new ConcurrentDictionary<string, Task>();
        readonly SemaphoreSlim slots;
        long heartbeatMs;
        int started;

        /// <param name="client">the gateway client (its token needs the <c>work</c> scope on the queues)</param>
        /// <param name="handlers">job type to handler; the worker claims only these types</param>
        /// <param name="options">the queues and the rest</param>
        /// <exception cref="ArgumentException">no handler, no queue, or a concurrency outside 1..100</exception>
        public Worker(JobQueueClient client, IDictionary<string, JobHandler> handlers, WorkerOptions options)
        {
            if (handlers == null || handlers.Count == 0 || handlers.Values.Any(h => h == null))
                throw new ArgumentException("Worker: handlers must map at least one job type to a handler", "handlers");
            if (options == null || options.Queues == null || options.Queues.Count == 0)
                throw new ArgumentException("Worker: Queues must name at least one queue", "options");
            if (options.Concurrency < 1 || options.Concurrency > 100)
                throw new ArgumentException("Worker: Concurrency must be 1..100, got " + options.Concurrency, "options");
            this.client = client;
            this.handlers = new Dictionary<string, JobHandler>(handlers);
            this.options = options;
            Name = options.Name ?? Dns.GetHostName() + "-" + System.Diagnostics.Process.GetCurrentProcess().Id + "-csharp";
            Stats = new WorkerStats();
            slots = new SemaphoreSlim(options.Concurrency, options.Concurrency);
        }

        /// <summary>The name the worker registers under.</summary>
        public string Name { get; private set; }

        /// <summary>The counts so far.</summary>
        public WorkerStats Stats { get; private set; }

        /// <summary>Whether <see cref="Stop"/> was called (or a signal came).</summary>
        public bool Stopping { get { return stopping.IsCancellationRequested; } }

        /// <summary>Stop claiming; <see cref="RunAsync"/> completes once the running jobs are reported.</summary>
        public void Stop()
        {
            if (!stopping.IsCancellationRequested)
            {
                options.Log("stopping: " + running.Count + " running job(s) finish first");
                stopping.Cancel();
            }
        }

        /// <summary>Register, then claim and run jobs until <see cref="Stop"/>, SIGTERM or SIGINT.</summary>
        /// <returns>the run's counts, once every running job has been reported</returns>
        /// <exception cref="GatewayException">the gateway refused the registration or a claim (401, 403...)</exception>
        public async Task<WorkerStats> RunAsync()
        {
            if (Interlocked.Exchange(ref started, 1) == 1)
                throw new InvalidOperationException("Worker.RunAsync was already called");
            Thread signals = options.HandleSignals ? WatchSignals() : null;
            try
            {
                var jobTypes = handlers.Keys.ToList();
                Registration registration = await Retrying(() => client.RegisterAsync(new RegisterOptions
                {
                    Name = Name,
                    Host = Dns.GetHostName(),
                    Pid = System.Diagnostics.Process.GetCurrentProcess().Id,
                    Languages = new[] { "csharp" },
                    Queues = options.Queues,
                    JobTypes = jobTypes,
                    Concurrency = options.Concurrency,
                    Version = JobQueueClient.Version,
                }, stopping.Token)).ConfigureAwait(false);
                if (registration == null) return Stats;
                heartbeatMs = Math.Max(1, options.HeartbeatMs ?? registration.HeartbeatMs);
                long waitMs = Math.Min(options.WaitMs, registration.MaxWaitMs);
                options.Log(string.Format("registered {0}: queues={1} job_types={2} concurrency={3}",
                    Name, string.Join(",", options.Queues), string.Join(",", jobTypes), options.Concurrency));
                try
                {
                    await Loop(jobTypes, waitMs).ConfigureAwait(false);
                }
                finally
                {
                    await Task.WhenAll(running.Values.ToArray()).ConfigureAwait(false);
                }
                try
                {
                    // Gone from the console and `jobqueue status` at once, not three heartbeats later.
                    await client.StopWorkerAsync(Name).ConfigureAwait(false);
                }
                catch (GatewayException e)
                {
                    options.Log("WARNING could not report the stop of " + Name + ": " + e.Message);
                }
            }
            finally
            {
                finished = true;
                if (signals != null) signals.Join();
                options.Log("stopped: " + Stats);
            }
            return Stats;
        }

        volatile bool finished;

        /// <summary>A thread that stops the worker on SIGTERM or SIGINT (Mono.Unix), until the run ends.</summary>
        Thread WatchSignals()
        {
            var watched = new[]
            {
                new Mono.Unix.UnixSignal(Mono.Unix.Native.Signum.SIGTERM),
                new Mono.Unix.UnixSignal(Mono.Unix.Native.Signum.SIGINT),
            };
            var thread = new Thread(() =>
            {
                try
                {
                    while (!finished)
                    {
                        int which = Mono.Unix.UnixSignal.WaitAny(watched, 250);
                        if (which >= 0 && which < watched.Length)
                        {
                            options.Log(watched[which].Signum + " received");
                            Stop();
                        }
                    }
                }
                finally
                {
                    foreach (var signal in watched) signal.Dispose();
                }
            }) { IsBackground = true, Name = "jobqueue-signals" };
            thread.Start();
            return thread;
        }

        async Task Loop(IList<string> jobTypes, long waitMs)
        {
            while (!Stopping)
            {
                try
                {
                    await slots.WaitAsync(stopping.Token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    break;
                }
                int free = 1;
                while (slots.Wait(0)) free++;
                var claim = new ClaimOptions
                {
                    Queues = options.Queues,
                    JobTypes = jobTypes,
                    Limit = free,
                    WaitMs = waitMs,
                    Worker = Name,
                    LeaseMs = options.LeaseMs,
                };
                IList<ClaimedJob> jobs;
                try
                {
                    // Not cancelled by Stop(): an abandoned claim's jobs would stay leased to no one
                    // until their lease expired. It ends within WaitMs and its jobs run.
                    jobs = await Retrying(() => client.ClaimAsync(claim)).ConfigureAwait(false);
                }
                catch
                {
                    slots.Release(free);
                    throw;
                }
                int got = jobs == null ? 0 : jobs.Count;
                if (free - got > 0) slots.Release(free - got);
                if (jobs == null) continue;
                foreach (ClaimedJob job in jobs)
                {
                    Interlocked.Increment(ref Stats.claimed);
                    var done = new TaskCompletionSource<bool>();
                    running[job.Jid] = done.Task;
#pragma warning disable 4014 // awaited through `running`, by the drain
                    Task.Run(async () =>
                    {
                        try
                        {
                            await Execute(job).ConfigureAwait(false);
                        }
                        finally
                        {
                            Task ignored;
                            running.TryRemove(job.Jid, out ignored);
                            slots.Release();
                            done.SetResult(true);
                        }
                    });
#pragma warning restore 4014
                }
            }
        }

        /// <summary>Call <paramref name="fn"/> until it answers; back off on an unreachable gateway, 503 or 429. Null once stopping.</summary>
        async Task<T> Retrying<T>(Func<Task<T>> fn) where T : class
        {
            int backoff = 500;
            while (!Stopping)
            {
                try
                {
                    return await fn().ConfigureAwait(false);
                }
                catch (GatewayException e) when (e.IsRetryable)
                {
                    int wait = e.RetryAfter.HasValue ? (int)(e.RetryAfter.Value * 1000) : backoff;
                    options.Log("WARNING " + e.Message + "; trying again in " + wait + " ms");
                    try
                    {
                        await Task.Delay(wait, stopping.Token).ConfigureAwait(false);
                    }
                    catch (OperationCanceledException)
                    {
                        return null;
                    }
                    backoff = Math.Min(backoff * 2, 10000);
                }
            }
            return null;
        }

        /// <summary>Run one claimed job and report it; never throws.</summary>
        async Task Execute(ClaimedJob job)
        {
            var ctx = new JobContext(job, client);
            using (var beating = new CancellationTokenSource())
            {
                Task beats = Heartbeats(job, ctx, beating.Token);
                Task<JsonValue> work;
                JobHandler handler;
                if (handlers.TryGetValue(job.JobType, out handler))
                {
                    work = Task.Run(() => handler(job.Payload, ctx));
                }
                else
                {
                    var missing = new TaskCompletionSource<JsonValue>();
                    missing.SetException(new InvalidOperationException("no handler for job type " + job.JobType));
                    work = missing.Task;
                }
                Task timer = Task.Delay(TimeSpan.FromMilliseconds(Math.Max(1, job.TimeoutMs)), beating.Token);
                Task first = await Task.WhenAny(work, timer).ConfigureAwait(false);
                beating.Cancel();
                try { await beats.ConfigureAwait(false); } catch (OperationCanceledException) { }
                try
                {
                    if (first != work)
                    {
                        ctx.Abort();
                        Observe(work);
                        await ReportFailure(job, ctx, "timed out after " + job.TimeoutMs + " ms", typeof(TimeoutException).FullName, true).ConfigureAwait(false);
                    }
                    else if (ctx.LeaseLost)
                    {
                        Observe(work);
                        Dropped(job);
                    }
                    else if (work.Status == TaskStatus.RanToCompletion)
                    {
                        JsonValue result = work.Result;
                        await Reporting(() => client.CompleteAsync(job.Jid, job.LeaseToken, result)).ConfigureAwait(false);
                        Interlocked.Increment(ref Stats.done);
                    }
                    else
                    {
                        Exception error = work.Exception != null ? work.Exception.GetBaseException() : new TaskCanceledException();
                        string message = string.IsNullOrEmpty(error.Message) ? error.GetType().Name : error.Message;
                        await ReportFailure(job, ctx, message, error.GetType().FullName, !(error is PermanentFailureException)).ConfigureAwait(false);
                    }
                }
                catch (LeaseLostException)
                {
                    Dropped(job);
                }
                catch (Exception e)
                {
                    options.Log("ERROR report of " + job.Jid + " failed: " + e.Message);
                }
            }
        }

        async Task ReportFailure(ClaimedJob job, JobContext ctx, string message, string exceptionClass, bool retry)
        {
            bool wasCancelled = ctx.CancelRequested;
            var fail = new FailOptions
            {
                Error = message.Length > MaxError ? message.Substring(0, MaxError) : message,
                ExceptionClass = exceptionClass.Length > 200 ? exceptionClass.Substring(0, 200) : exceptionClass,
                Retry = retry,
                Cancelled = wasCancelled,
            };
            string status = await Reporting(() => client.FailAsync(job.Jid, job.LeaseToken, fail)).ConfigureAwait(false);
            if (wasCancelled) Interlocked.Increment(ref Stats.cancelled); else Interlocked.Increment(ref Stats.failed);
            options.Log(string.Format("WARNING job {0} ({1}) failed: {2}; stored {3}", job.Jid, job.JobType, exceptionClass, status));
        }

        async Task Heartbeats(ClaimedJob job, JobContext ctx, CancellationToken done)
        {
            while (!done.IsCancellationRequested)
            {
                await Task.Delay(TimeSpan.FromMilliseconds(heartbeatMs), done).ConfigureAwait(false);
                try
                {
                    if (await client.HeartbeatAsync(job.Jid, job.LeaseToken, options.LeaseMs, done).ConfigureAwait(false))
                    {
                        ctx.RequestCancel();
                    }
                }
                catch (LeaseLostException)
                {
                    ctx.LoseLease();
                    return;
                }
                catch (GatewayException e)
                {
                    options.Log("WARNING heartbeat of " + job.Jid + " failed: " + e.Message);
                }
            }
        }

        /// <summary>A report, retried while the gateway is unreachable, 503 or 429 (the lease bounds this).</summary>
        static async Task<T> Reporting<T>(Func<Task<T>> fn)
        {
            int backoff = 250;
            for (int tries = 1; ; tries++)
            {
                try
                {
                    return await fn().ConfigureAwait(false);
                }
                catch (GatewayException e) when (e.IsRetryable && tries < 8)
                {
                    await Task.Delay(e.RetryAfter.HasValue ? (int)(e.RetryAfter.Value * 1000) : backoff).ConfigureAwait(false);
                    backoff = Math.Min(backoff * 2, 5000);
                }
            }
        }

        void Dropped(ClaimedJob job)
        {
            Interlocked.Increment(ref Stats.leaseLost);
            options.Log("WARNING job " + job.Jid + " (" + job.JobType + "): lease lost, outcome dropped");
        }

        /// <summary>Observe a handler task's late failure, so it is not an unobserved exception.</summary>
        static void Observe(Task task)
        {
            task.ContinueWith(t => { var ignored = t.Exception; }, TaskContinuationOptions.OnlyOnFaulted);
        }
    }
}
