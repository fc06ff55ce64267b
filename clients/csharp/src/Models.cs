using System;
using System.Collections.Generic;
using System.Globalization;
using System.Json;

namespace DjangoJobQueue.Client
{
    /// <summary>Reads members of the gateway's JSON answers.</summary>
    static class J
    {
        public static JsonValue Get(JsonObject obj, string name)
        {
            JsonValue value;
            return obj != null && obj.TryGetValue(name, out value) ? value : null;
        }

        public static string Str(JsonObject obj, string name)
        {
            JsonValue value = Get(obj, name);
            return value != null && value.JsonType == JsonType.String ? (string)value : null;
        }

        public static long Long(JsonObject obj, string name)
        {
            JsonValue value = Get(obj, name);
            if (value == null || value.JsonType != JsonType.Number)
            {
                throw new FormatException("no number \"" + name + "\" in " + (obj == null ? "null" : obj.ToString()));
            }
            return (long)value;
        }

        public static long? LongOrNull(JsonObject obj, string name)
        {
            JsonValue value = Get(obj, name);
            return value != null && value.JsonType == JsonType.Number ? (long?)(long)value : null;
        }

        public static bool Bool(JsonObject obj, string name)
        {
            JsonValue value = Get(obj, name);
            if (value == null || value.JsonType != JsonType.Boolean)
            {
                throw new FormatException("no boolean \"" + name + "\" in " + (obj == null ? "null" : obj.ToString()));
            }
            return (bool)value;
        }

        public static JsonObject Obj(JsonValue value)
        {
            JsonObject obj = value as JsonObject;
            if (obj == null)
            {
                throw new FormatException("the gateway's answer is not a JSON object: " + (value == null ? "null" : value.ToString()));
            }
            return obj;
        }

        /// <summary>JSON text of a value; null is <c>null</c>.</summary>
        public static string Dump(JsonValue value)
        {
            return value == null ? "null" : value.ToString();
        }
    }

    /// <summary><c>enqueued</c> with the new job's jid, or <c>deduplicated</c> with the key's holder.</summary>
    public sealed class EnqueueResult
    {
        public string Status { get; private set; }
        public string Jid { get; private set; }
        public JsonObject Raw { get; private set; }

        public static EnqueueResult FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            return new EnqueueResult { Raw = o, Status = J.Str(o, "status"), Jid = J.Str(o, "jid") };
        }
    }

    /// <summary>A failed attempt: <c>Message</c> reads <c>&lt;Class&gt;: &lt;error&gt;</c>.</summary>
    public sealed class ErrorEntry
    {
        public long? Attempt { get; private set; }
        public string Message { get; private set; }
        public string ExceptionClass { get; private set; }
        public string At { get; private set; }

        public static ErrorEntry FromJson(JsonValue value)
        {
            JsonObject o = value as JsonObject;
            if (o == null)
            {
                return null;
            }
            return new ErrorEntry
            {
                Attempt = J.LongOrNull(o, "attempt"),
                Message = J.Str(o, "message") ?? "",
                ExceptionClass = J.Str(o, "exception_class") ?? "",
                At = J.Str(o, "at"),
            };
        }
    }

    /// <summary>
    /// A job by jid. <c>State</c>: scheduled, waiting, running, failed, done, cancelled, blocked; times
    /// are ISO 8601; <c>Payload</c> and <c>Result</c> are null for a secure job type.
    /// </summary>
    public sealed class Job
    {
        public string Jid { get; private set; }
        public string Queue { get; private set; }
        public string JobType { get; private set; }
        public string Id { get; private set; }
        public string Status { get; private set; }
        public string State { get; private set; }
        public long Attempt { get; private set; }
        public long MaxRetry { get; private set; }
        public long Priority { get; private set; }
        public bool Secure { get; private set; }
        public JsonValue Payload { get; private set; }
        public JsonValue Result { get; private set; }
        public ErrorEntry LastError { get; private set; }
        public bool CancelRequested { get; private set; }
        public string RunAt { get; private set; }
        public string CreatedAt { get; private set; }
        public string StartedAt { get; private set; }
        public string FinishedAt { get; private set; }
        public string ExpiresAt { get; private set; }
        public JsonObject Raw { get; private set; }

        public static Job FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            return new Job
            {
                Raw = o,
                Jid = J.Str(o, "jid"),
                Queue = J.Str(o, "queue"),
                JobType = J.Str(o, "job_type"),
                Id = J.Str(o, "id"),
                Status = J.Str(o, "status"),
                State = J.Str(o, "state"),
                Attempt = J.Long(o, "attempt"),
                MaxRetry = J.Long(o, "max_retry"),
                Priority = J.Long(o, "priority"),
                Secure = J.Bool(o, "secure"),
                Payload = J.Get(o, "payload"),
                Result = J.Get(o, "result"),
                LastError = ErrorEntry.FromJson(J.Get(o, "last_error")),
                CancelRequested = J.Bool(o, "cancel_requested"),
                RunAt = J.Str(o, "run_at"),
                CreatedAt = J.Str(o, "created_at"),
                StartedAt = J.Str(o, "started_at"),
                FinishedAt = J.Str(o, "finished_at"),
                ExpiresAt = J.Str(o, "expires_at"),
            };
        }
    }

    /// <summary>A job as the id verbs' <c>Get</c> and <c>List</c> show it.</summary>
    public sealed class IdJob
    {
        public string Id { get; private set; }
        public JsonValue Value { get; private set; }
        public string State { get; private set; }
        public string At { get; private set; }
        public long Attempt { get; private set; }
        public string Jid { get; private set; }
        public string Queue { get; private set; }
        public string JobType { get; private set; }
        public long Priority { get; private set; }
        public long MaxRetry { get; private set; }
        public JsonValue Result { get; private set; }
        public string Message { get; private set; }
        public bool CancelRequested { get; private set; }
        public string CreatedAt { get; private set; }
        public string StartedAt { get; private set; }
        public string FinishedAt { get; private set; }
        public JsonObject Raw { get; private set; }

        public static IdJob FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            return new IdJob
            {
                Raw = o,
                Id = J.Str(o, "id"),
                Value = J.Get(o, "value"),
                State = J.Str(o, "state"),
                At = J.Str(o, "at"),
                Attempt = J.Long(o, "attempt"),
                Jid = J.Str(o, "jid"),
                Queue = J.Str(o, "queue"),
                JobType = J.Str(o, "job_type"),
                Priority = J.Long(o, "priority"),
                MaxRetry = J.Long(o, "max_retry"),
                Result = J.Get(o, "result"),
                Message = J.Str(o, "message") ?? "",
                CancelRequested = J.Bool(o, "cancel_requested"),
                CreatedAt = J.Str(o, "created_at"),
                StartedAt = J.Str(o, "started_at"),
                FinishedAt = J.Str(o, "finished_at"),
            };
        }
    }

    /// <summary>A page of <c>Ids.ListAsync</c>; <c>Next</c> is the following page's cursor, or null.</summary>
    public sealed class Page
    {
        public IList<IdJob> Jobs { get; private set; }
        public string Next { get; private set; }
        public JsonObject Raw { get; private set; }

        public static Page FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            var jobs = new List<IdJob>();
            var array = J.Get(o, "jobs") as JsonArray;
            if (array != null)
            {
                foreach (JsonValue item in array)
                {
                    jobs.Add(IdJob.FromJson(item));
                }
            }
            return new Page { Raw = o, Jobs = jobs, Next = J.Str(o, "next") };
        }
    }

    /// <summary><c>Cancelled</c>: a waiting job stopped; <c>CancelRequested</c>: a running one asked to.</summary>
    public sealed class CancelResult
    {
        public bool Cancelled { get; private set; }
        public bool CancelRequested { get; private set; }
        public JsonObject Raw { get; private set; }

        public static CancelResult FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            return new CancelResult { Raw = o, Cancelled = J.Bool(o, "cancelled"), CancelRequested = J.Bool(o, "cancel_requested") };
        }
    }

    /// <summary>What a registered worker should use: lease, heartbeat interval, longest claim wait, ms.</summary>
    public sealed class Registration
    {
        public string Name { get; private set; }
        public long LeaseMs { get; private set; }
        public long HeartbeatMs { get; private set; }
        public long MaxWaitMs { get; private set; }
        public JsonObject Raw { get; private set; }

        public static Registration FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            return new Registration
            {
                Raw = o,
                Name = J.Str(o, "name"),
                LeaseMs = J.Long(o, "lease_ms"),
                HeartbeatMs = J.Long(o, "heartbeat_ms"),
                MaxWaitMs = J.Long(o, "max_wait_ms"),
            };
        }
    }

    /// <summary>A claimed job: run it, heartbeat it, report on it with its <c>LeaseToken</c>.</summary>
    public sealed class ClaimedJob
    {
        public string Jid { get; private set; }
        public string Queue { get; private set; }
        public string JobType { get; private set; }
        public string Id { get; private set; }
        public JsonValue Payload { get; private set; }
        public long Attempt { get; private set; }
        public long MaxRetry { get; private set; }
        public long Priority { get; private set; }
        /// <summary>One attempt's time limit, ms.</summary>
        public long TimeoutMs { get; private set; }
        public string LeaseToken { get; private set; }
        public string LeaseExpiresAt { get; private set; }
        public bool CancelRequested { get; private set; }
        public JsonObject Raw { get; private set; }

        public static ClaimedJob FromJson(JsonValue value)
        {
            JsonObject o = J.Obj(value);
            return new ClaimedJob
            {
                Raw = o,
                Jid = J.Str(o, "jid"),
                Queue = J.Str(o, "queue"),
                JobType = J.Str(o, "job_type"),
                Id = J.Str(o, "id"),
                Payload = J.Get(o, "payload"),
                Attempt = J.Long(o, "attempt"),
                MaxRetry = J.Long(o, "max_retry"),
                Priority = J.Long(o, "priority"),
                TimeoutMs = J.Long(o, "timeout_ms"),
                LeaseToken = J.Str(o, "lease_token"),
                LeaseExpiresAt = J.Str(o, "lease_expires_at"),
                CancelRequested = J.Bool(o, "cancel_requested"),
            };
        }
    }
}
