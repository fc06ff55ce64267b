using System;
using System.Collections.Generic;
using System.Globalization;
using System.Json;
using System.Linq;

namespace DjangoJobQueue.Client
{
    static class Put
    {
        public static void If(JsonObject body, string name, string value)
        {
            if (value != null) body[name] = value;
        }

        public static void If(JsonObject body, string name, long? value)
        {
            if (value.HasValue) body[name] = value.Value;
        }

        public static void If(JsonObject body, string name, double? value)
        {
            if (value.HasValue) body[name] = value.Value;
        }

        public static void If(JsonObject body, string name, bool? value)
        {
            if (value.HasValue) body[name] = value.Value;
        }

        public static void If(JsonObject body, string name, IEnumerable<string> values)
        {
            if (values != null) body[name] = Strings(values);
        }

        public static JsonArray Strings(IEnumerable<string> values)
        {
            return new JsonArray(values.Select(v => (JsonValue)new JsonPrimitive(v)));
        }

        public static string Time(DateTimeOffset? at)
        {
            return at.HasValue ? at.Value.ToString("o", CultureInfo.InvariantCulture) : null;
        }
    }

    /// <summary>
    /// The options of one job, as <c>enqueue_job</c> takes them; every one left null is the
    /// gateway's default: <c>new EnqueueOptions { Queue = "emails", Priority = 1, Delay = "5s" }</c>.
    /// </summary>
    public sealed class EnqueueOptions
    {
        /// <summary>The queue (default: the job type's, else <c>default</c>).</summary>
        public string Queue { get; set; }
        /// <summary>1 runs first.</summary>
        public long? Priority { get; set; }
        /// <summary>Run no sooner than this from now: <c>"500ms"</c>, <c>"5s"</c>, <c>"1m"</c>. Not with RunAt.</summary>
        public string Delay { get; set; }
        /// <summary>Run no sooner than this many seconds from now.</summary>
        public double? DelaySeconds { get; set; }
        /// <summary>Run no sooner than this time.</summary>
        public DateTimeOffset? RunAt { get; set; }
        /// <summary>Run no sooner than this time, ISO 8601 with an offset (as given).</summary>
        public string RunAtText { get; set; }
        /// <summary>Dead-letter the job if it is not claimed within this many ms of its run time.</summary>
        public long? ExpiresMs { get; set; }
        /// <summary>One attempt's time limit, ms.</summary>
        public long? TimeoutMs { get; set; }
        /// <summary>Retries after the first attempt (0: none).</summary>
        public long? MaxRetry { get; set; }
        /// <summary>A second job with this key (while the first holds it) is deduplicated to the first.</summary>
        public string UniqueKey { get; set; }
        /// <summary><c>while_locked</c>, or (Pro) <c>until_executing</c>, <c>until_executed</c>.</summary>
        public string UniqueMode { get; set; }
        /// <summary>How long the unique key is held at most, ms.</summary>
        public long? UniqueTtlMs { get; set; }
        /// <summary>An id the job holds; a held id is a <see cref="DuplicateJobException"/>.</summary>
        public string Id { get; set; }
        /// <summary>The key a partitioned limit counts the job under (docs/limits.md).</summary>
        public string LimitKey { get; set; }
        /// <summary>An open batch's id the job joins (docs/workflows.md); EnqueueAsync only, not a batch.</summary>
        public long? Batch { get; set; }
        /// <summary>The jids the job waits for (docs/workflows.md): it is <c>blocked</c> until each is done. EnqueueAsync only.</summary>
        public IEnumerable<string> After { get; set; }
        /// <summary>What an upstream job's death does to it: <c>cancel</c> (the default), <c>skip</c> or <c>ignore</c>; with After.</summary>
        public string OnUpstreamFailure { get; set; }

        internal void WriteTo(JsonObject body)
        {
            Put.If(body, "queue", Queue);
            Put.If(body, "priority", Priority);
            Put.If(body, "delay", Delay);
            Put.If(body, "delay", DelaySeconds);
            Put.If(body, "run_at", RunAtText ?? Put.Time(RunAt));
            Put.If(body, "expires_ms", ExpiresMs);
            Put.If(body, "timeout_ms", TimeoutMs);
            Put.If(body, "max_retry", MaxRetry);
            Put.If(body, "unique_key", UniqueKey);
            Put.If(body, "unique_mode", UniqueMode);
            Put.If(body, "unique_ttl_ms", UniqueTtlMs);
            Put.If(body, "id", Id);
            Put.If(body, "limit_key", LimitKey);
            Put.If(body, "batch", Batch);
            Put.If(body, "after", After);
            Put.If(body, "on_upstream_failure", OnUpstreamFailure);
        }
    }

    /// <summary>One job of a batch.</summary>
    public sealed class JobSpec
    {
        public JobSpec(string jobType, JsonValue payload, EnqueueOptions options = null)
        {
            JobType = jobType;
            Payload = payload;
            Options = options;
        }

        public string JobType { get; private set; }
        public JsonValue Payload { get; private set; }
        public EnqueueOptions Options { get; private set; }
    }

    /// <summary>The value and time of an id verb (<c>Add</c>, <c>Set</c>, <c>Update</c>).</summary>
    public sealed class IdValue
    {
        /// <summary>Whether <c>Value</c> is sent (a JSON null included).</summary>
        public bool HasValue { get; private set; }
        JsonValue value;
        /// <summary>The job's value (its payload).</summary>
        public JsonValue Value { get { return value; } set { this.value = value; HasValue = true; } }
        /// <summary>The job type (default: the queue's one job type).</summary>
        public string JobType { get; set; }
        /// <summary>When the job runs. Not with Delay.</summary>
        public DateTimeOffset? At { get; set; }
        /// <summary>When the job runs, ISO 8601 with an offset (as given).</summary>
        public string AtText { get; set; }
        /// <summary>Run no sooner than this from now: <c>"500ms"</c>, <c>"5s"</c>, <c>"1m"</c>.</summary>
        public string Delay { get; set; }
        /// <summary>Run no sooner than this many seconds from now.</summary>
        public double? DelaySeconds { get; set; }

        internal JsonObject ToJson()
        {
            var body = new JsonObject();
            if (HasValue) body["value"] = value;
            Put.If(body, "job_type", JobType);
            Put.If(body, "at", AtText ?? Put.Time(At));
            Put.If(body, "delay", Delay);
            Put.If(body, "delay", DelaySeconds);
            return body;
        }
    }

    /// <summary>The filters of <c>Ids.ListAsync</c>.</summary>
    public sealed class ListOptions
    {
        public string Prefix { get; set; }
        /// <summary>scheduled, waiting, running, failed, done or cancelled.</summary>
        public string State { get; set; }
        public int? Limit { get; set; }
        /// <summary>A previous page's <c>Next</c>.</summary>
        public string Cursor { get; set; }

        internal IList<KeyValuePair<string, string>> Query()
        {
            var query = new List<KeyValuePair<string, string>>();
            if (Prefix != null) query.Add(new KeyValuePair<string, string>("prefix", Prefix));
            if (State != null) query.Add(new KeyValuePair<string, string>("state", State));
            if (Limit.HasValue) query.Add(new KeyValuePair<string, string>("limit", Limit.Value.ToString(CultureInfo.InvariantCulture)));
            if (Cursor != null) query.Add(new KeyValuePair<string, string>("cursor", Cursor));
            return query;
        }
    }

    /// <summary>A worker's registration: <c>Name</c> and <c>Queues</c> are required.</summary>
    public sealed class RegisterOptions
    {
        public string Name { get; set; }
        public string Host { get; set; }
        public long? Pid { get; set; }
        public IList<string> Languages { get; set; }
        public IList<string> Queues { get; set; }
        public IList<string> JobTypes { get; set; }
        public int? Concurrency { get; set; }
        public string Version { get; set; }

        internal JsonObject ToJson()
        {
            var body = new JsonObject();
            body["name"] = Name;
            Put.If(body, "host", Host);
            Put.If(body, "pid", Pid);
            Put.If(body, "languages", Languages);
            body["queues"] = Put.Strings(Queues ?? new List<string>());
            Put.If(body, "job_types", JobTypes);
            Put.If(body, "concurrency", Concurrency);
            Put.If(body, "version", Version);
            return body;
        }
    }

    /// <summary>A claim: up to <c>Limit</c> due jobs of <c>Queues</c>, waiting up to <c>WaitMs</c> for one.</summary>
    public sealed class ClaimOptions
    {
        public IList<string> Queues { get; set; }
        /// <summary>Only these job types (null or empty: any type).</summary>
        public IList<string> JobTypes { get; set; }
        /// <summary>1..100 (default 1).</summary>
        public int? Limit { get; set; }
        /// <summary>How long to wait for a job, 0..30000 ms (default 0).</summary>
        public long? WaitMs { get; set; }
        /// <summary>The registered worker's name.</summary>
        public string Worker { get; set; }
        /// <summary>The lease, ms (default: the site's <c>LEASE_MS</c>).</summary>
        public long? LeaseMs { get; set; }

        internal JsonObject ToJson()
        {
            var body = new JsonObject();
            body["queues"] = Put.Strings(Queues ?? new List<string>());
            if (JobTypes != null && JobTypes.Count > 0) body["job_types"] = Put.Strings(JobTypes);
            Put.If(body, "limit", Limit);
            Put.If(body, "wait_ms", WaitMs);
            Put.If(body, "worker", Worker);
            Put.If(body, "lease_ms", LeaseMs);
            return body;
        }
    }

    /// <summary>
    /// A failed attempt's report: its message, its exception class (stored as the attempt's
    /// <c>exception_class</c>), whether to retry (false: dead letter at once), whether it
    /// stopped on a cancel request.
    /// </summary>
    public sealed class FailOptions
    {
        public string Error { get; set; }
        public string ExceptionClass { get; set; }
        public bool? Retry { get; set; }
        public bool? Cancelled { get; set; }

        internal void WriteTo(JsonObject body)
        {
            Put.If(body, "error", Error);
            Put.If(body, "exception_class", ExceptionClass);
            Put.If(body, "retry", Retry);
            Put.If(body, "cancelled", Cancelled);
        }
    }
}
