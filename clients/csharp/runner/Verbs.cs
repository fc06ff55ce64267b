using System;
using System.Collections.Generic;
using System.Json;
using System.Linq;
using System.Threading.Tasks;
using DjangoJobQueue.Client;

namespace DjangoJobQueue.Conformance
{
    /// <summary>A scenario that did not hold (or could not be read): its reason is the report's.</summary>
    sealed class ScenarioError : Exception
    {
        public ScenarioError(string message) : base(message) { }
    }

    /// <summary>
    /// The conformance suite's language-neutral verbs, each made through the C# client's own
    /// call: arguments in the gateway's names (snake_case), answers as the gateway's JSON.
    /// </summary>
    static class Verbs
    {
        static readonly string[] EnqueueOptionNames = { "queue", "priority", "delay", "run_at", "expires_ms",
            "timeout_ms", "max_retry", "unique_key", "unique_mode", "unique_ttl_ms", "id", "limit_key", "batch", "after",
            "on_upstream_failure" };

        public static async Task<JsonValue> Call(JobQueueClient client, string verb, JsonObject args)
        {
            switch (verb)
            {
                case "enqueue":
                    Known(args, EnqueueOptionNames, "job_type", "payload", "options");
                    return (await client.EnqueueAsync(Text(args, "job_type"), Get(args, "payload"), EnqueueOptions(args))).Raw;
                case "enqueue_batch":
                {
                    Known(args, new string[0], "jobs");
                    var jobs = new List<JobSpec>();
                    foreach (JsonValue item in Array(Required(args, "jobs")))
                    {
                        var job = Object(item);
                        Known(job, EnqueueOptionNames, "job_type", "payload", "options");
                        jobs.Add(new JobSpec(Text(job, "job_type"), Get(job, "payload"), EnqueueOptions(job)));
                    }
                    var results = await client.EnqueueBatchAsync(jobs);
                    return Obj("results", new JsonArray(results.Select(r => (JsonValue)r.Raw)));
                }
                case "get_job":
                    Known(args, new string[0], "jid");
                    return (await client.GetJobAsync(Text(args, "jid"))).Raw;
                case "cancel":
                    Known(args, new string[0], "jid");
                    return (await client.CancelAsync(Text(args, "jid"))).Raw;
                case "retry":
                    Known(args, new string[0], "jid");
                    return Obj("retried", await client.RetryAsync(Text(args, "jid")));
                case "ids.add":
                    Known(args, new[] { "value", "job_type", "at", "delay" }, "queue", "id");
                    return Obj("added", await client.Ids.AddAsync(Text(args, "queue"), Text(args, "id"), IdValue(args)));
                case "ids.set":
                    Known(args, new[] { "value", "job_type", "at", "delay" }, "queue", "id");
                    return Obj("set", await client.Ids.SetAsync(Text(args, "queue"), Text(args, "id"), IdValue(args)));
                case "ids.update":
                    Known(args, new[] { "value", "job_type", "at", "delay" }, "queue", "id");
                    return Obj("updated", await client.Ids.UpdateAsync(Text(args, "queue"), Text(args, "id"), IdValue(args)));
                case "ids.cancel":
                    Known(args, new string[0], "queue", "id");
                    return Obj("cancelled", await client.Ids.CancelAsync(Text(args, "queue"), Text(args, "id")));
                case "ids.get":
                {
                    Known(args, new string[0], "queue", "id");
                    IdJob job = await client.Ids.GetAsync(Text(args, "queue"), Text(args, "id"));
                    return job == null ? null : job.Raw;
                }
                case "ids.list":
                    Known(args, new[] { "prefix", "state", "limit", "cursor" }, "queue");
                    return (await client.Ids.ListAsync(Text(args, "queue"), new ListOptions
                    {
                        Prefix = OptionalText(args, "prefix"),
                        State = OptionalText(args, "state"),
                        Limit = (int?)Number(args, "limit"),
                        Cursor = OptionalText(args, "cursor"),
                    })).Raw;
                case "register":
                    Known(args, new[] { "host", "pid", "languages", "job_types", "concurrency", "version" }, "name", "queues");
                    return (await client.RegisterAsync(new RegisterOptions
                    {
                        Name = Text(args, "name"),
                        Host = OptionalText(args, "host"),
                        Pid = Number(args, "pid"),
                        Languages = OptionalStrings(args, "languages"),
                        Queues = Strings(Required(args, "queues")),
                        JobTypes = OptionalStrings(args, "job_types"),
                        Concurrency = (int?)Number(args, "concurrency"),
                        Version = OptionalText(args, "version"),
                    })).Raw;
                case "claim":
                {
                    Known(args, new[] { "job_types", "limit", "wait_ms", "worker", "lease_ms" }, "queues");
                    var jobs = await client.ClaimAsync(new ClaimOptions
                    {
                        Queues = Strings(Required(args, "queues")),
                        JobTypes = OptionalStrings(args, "job_types"),
                        Limit = (int?)Number(args, "limit"),
                        WaitMs = Number(args, "wait_ms"),
                        Worker = OptionalText(args, "worker"),
                        LeaseMs = Number(args, "lease_ms"),
                    });
                    return Obj("jobs", new JsonArray(jobs.Select(j => (JsonValue)j.Raw)));
                }
                case "heartbeat":
                    Known(args, new[] { "lease_ms" }, "jid", "lease_token");
                    return Obj("cancel_requested", await client.HeartbeatAsync(Text(args, "jid"), Text(args, "lease_token"), Number(args, "lease_ms")));
                case "complete":
                    Known(args, new[] { "result" }, "jid", "lease_token");
                    return Obj("status", await client.CompleteAsync(Text(args, "jid"), Text(args, "lease_token"), Get(args, "result")));
                case "fail":
                    Known(args, new[] { "error", "exception_class", "retry", "cancelled" }, "jid", "lease_token");
                    return Obj("status", await client.FailAsync(Text(args, "jid"), Text(args, "lease_token"), new FailOptions
                    {
                        Error = OptionalText(args, "error"),
                        ExceptionClass = OptionalText(args, "exception_class"),
                        Retry = Bool(args, "retry"),
                        Cancelled = Bool(args, "cancelled"),
                    }));
                case "stop_worker":
                {
                    Known(args, new string[0], "name");
                    bool stopped = await client.StopWorkerAsync(Text(args, "name"));
                    var answer = Obj("stopped", stopped);
                    answer["name"] = Text(args, "name");
                    return answer;
                }
                default:
                    throw new ScenarioError("unknown verb " + verb);
            }
        }

        static EnqueueOptions EnqueueOptions(JsonObject args)
        {
            JsonObject source = Get(args, "options") as JsonObject ?? args;
            JsonValue delay = Get(source, "delay");
            return new EnqueueOptions
            {
                Queue = OptionalText(source, "queue"),
                Priority = Number(source, "priority"),
                Delay = delay != null && delay.JsonType == JsonType.String ? (string)delay : null,
                DelaySeconds = delay != null && delay.JsonType == JsonType.Number ? (double?)(double)delay : null,
                RunAtText = OptionalText(source, "run_at"),
                ExpiresMs = Number(source, "expires_ms"),
                TimeoutMs = Number(source, "timeout_ms"),
                MaxRetry = Number(source, "max_retry"),
                UniqueKey = OptionalText(source, "unique_key"),
                UniqueMode = OptionalText(source, "unique_mode"),
                UniqueTtlMs = Number(source, "unique_ttl_ms"),
                Id = OptionalText(source, "id"),
                LimitKey = OptionalText(source, "limit_key"),
                Batch = Number(source, "batch"),
                After = OptionalStrings(source, "after"),
                OnUpstreamFailure = OptionalText(source, "on_upstream_failure"),
            };
        }

        static IdValue IdValue(JsonObject args)
        {
            JsonValue delay = Get(args, "delay");
            var value = new IdValue
            {
                JobType = OptionalText(args, "job_type"),
                AtText = OptionalText(args, "at"),
                Delay = delay != null && delay.JsonType == JsonType.String ? (string)delay : null,
                DelaySeconds = delay != null && delay.JsonType == JsonType.Number ? (double?)(double)delay : null,
            };
            if (args.ContainsKey("value")) value.Value = Get(args, "value");
            return value;
        }

        /// <summary>Refuse an argument the verb does not take: a misspelt scenario fails loudly.</summary>
        static void Known(JsonObject args, string[] optional, params string[] required)
        {
            foreach (string name in args.Keys)
            {
                if (!optional.Contains(name) && !required.Contains(name)) throw new ScenarioError("unknown argument " + name);
            }
        }

        public static JsonValue Get(JsonObject obj, string name)
        {
            JsonValue value;
            return obj.TryGetValue(name, out value) ? value : null;
        }

        static JsonValue Required(JsonObject args, string name)
        {
            if (!args.ContainsKey(name)) throw new ScenarioError("missing argument " + name);
            return Get(args, name);
        }

        static string Text(JsonObject args, string name)
        {
            JsonValue value = Required(args, name);
            return value == null ? null : value.JsonType == JsonType.String ? (string)value : value.ToString();
        }

        static string OptionalText(JsonObject args, string name)
        {
            JsonValue value = Get(args, name);
            return value == null ? null : value.JsonType == JsonType.String ? (string)value : value.ToString();
        }

        static long? Number(JsonObject args, string name)
        {
            JsonValue value = Get(args, name);
            return value != null && value.JsonType == JsonType.Number ? (long?)(long)value : null;
        }

        static bool? Bool(JsonObject args, string name)
        {
            JsonValue value = Get(args, name);
            return value != null && value.JsonType == JsonType.Boolean ? (bool?)(bool)value : null;
        }

        static JsonArray Array(JsonValue value)
        {
            var array = value as JsonArray;
            if (array == null) throw new ScenarioError("not an array: " + J(value));
            return array;
        }

        static JsonObject Object(JsonValue value)
        {
            var obj = value as JsonObject;
            if (obj == null) throw new ScenarioError("not an object: " + J(value));
            return obj;
        }

        static IList<string> Strings(JsonValue value)
        {
            return Array(value).Select(item => item != null && item.JsonType == JsonType.String ? (string)item : J(item)).ToList();
        }

        static IList<string> OptionalStrings(JsonObject args, string name)
        {
            JsonValue value = Get(args, name);
            return value == null ? null : Strings(value);
        }

        static JsonObject Obj(string name, JsonValue value)
        {
            var obj = new JsonObject();
            obj[name] = value;
            return obj;
        }

        /// <summary>JSON text of a value; null is <c>null</c>.</summary>
        public static string J(JsonValue value)
        {
            return value == null ? "null" : value.ToString();
        }
    }
}
