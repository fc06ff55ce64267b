using System;
using System.Collections.Generic;
using System.Globalization;
using System.Json;
using System.Linq;
using System.Net;
using System.Net.Http;
using System.Net.Http.Headers;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace DjangoJobQueue.Client
{
    /// <summary>
    /// A client of the django-jobqueue HTTP gateway (docs/gateway.md, "Routes"): the producer
    /// calls and the worker protocol's calls, async, on <see cref="HttpClient"/>. Every call
    /// answers the documented shape or throws the <see cref="GatewayException"/> subclass of
    /// its error code (<see cref="GatewayUnreachableException"/> when no answer came).
    /// Thread-safe: share one client.
    /// </summary>
    public sealed class JobQueueClient : IDisposable
    {
        /// <summary>The client's version, sent at registration.</summary>
        public const string Version = "0.1.0";

        readonly HttpClient http;
        readonly TimeSpan timeout;

        /// <param name="url">the site's root (<c>http://127.0.0.1:8000</c>) or the gateway's (<c>.../sdk</c>)</param>
        /// <param name="token">a bearer token, <c>jqt_...</c> (<c>manage.py jobqueue token create</c>)</param>
        /// <param name="timeout">a request's time limit beyond a claim's own wait (default 30 s)</param>
        /// <exception cref="ArgumentException">the url or the token is empty</exception>
        public JobQueueClient(string url, string token, TimeSpan? timeout = null)
        {
            if (string.IsNullOrWhiteSpace(url))
                throw new ArgumentException("JobQueueClient: url is required (the site's root, e.g. http://127.0.0.1:8000)", "url");
            if (string.IsNullOrWhiteSpace(token))
                throw new ArgumentException("JobQueueClient: token is required (manage.py jobqueue token create)", "token");
            string root = url.TrimEnd('/');
            BaseUrl = root.EndsWith("/sdk", StringComparison.Ordinal) ? root : root + "/sdk";
            this.timeout = timeout ?? TimeSpan.FromSeconds(30);
            // Mono's HttpClient allows 2 connections per host by default: a long-polling
            // claim would hold one and queue the heartbeats and reports behind it.
            ServicePoint point = ServicePointManager.FindServicePoint(new Uri(BaseUrl));
            point.ConnectionLimit = Math.Max(point.ConnectionLimit, 128);
            http = new HttpClient { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
            http.DefaultRequestHeaders.ExpectContinue = false;
            http.DefaultRequestHeaders.Authorization = new AuthenticationHeaderValue("Bearer", token);
            http.DefaultRequestHeaders.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
            Ids = new IdVerbs(this);
        }

        /// <summary>The gateway's root, ending in <c>/sdk</c>.</summary>
        public string BaseUrl { get; private set; }

        /// <summary>The id verbs: <c>await client.Ids.AddAsync("reports", "user/42", new IdValue { Value = 1 })</c>.</summary>
        public IdVerbs Ids { get; private set; }

        public void Dispose()
        {
            http.Dispose();
        }

        // Producer calls ----------------------------------------------------------

        /// <summary>Enqueue one job: <c>enqueued</c> (201) with the new jid, or <c>deduplicated</c> (200).</summary>
        /// <exception cref="InvalidRequestException">an invalid option (<c>Field</c> names it)</exception>
        /// <exception cref="DuplicateJobException">the id is held (<c>Jid</c> is the holder's)</exception>
        /// <exception cref="ProRequiredException">a Pro unique mode without a licence</exception>
        public async Task<EnqueueResult> EnqueueAsync(string jobType, JsonValue payload, EnqueueOptions options = null,
            CancellationToken cancel = default(CancellationToken))
        {
            return EnqueueResult.FromJson(await RequestAsync("POST", "/jobs", JobBody(jobType, payload, options), null, 0, cancel).ConfigureAwait(false));
        }

        /// <summary>
        /// Enqueue up to <c>MAX_BATCH</c> (1000) jobs, all or nothing: one refused job refuses
        /// the batch (<c>Index</c> names it) and nothing is stored. One answer per job, in order.
        /// </summary>
        public async Task<IList<EnqueueResult>> EnqueueBatchAsync(IEnumerable<JobSpec> jobs,
            CancellationToken cancel = default(CancellationToken))
        {
            var body = new JsonObject();
            body["jobs"] = new JsonArray(jobs.Select(j => (JsonValue)JobBody(j.JobType, j.Payload, j.Options)));
            JsonObject answer = J.Obj(await RequestAsync("POST", "/jobs/batch", body, null, 0, cancel).ConfigureAwait(false));
            var results = new List<EnqueueResult>();
            foreach (JsonValue item in (JsonArray)J.Get(answer, "results"))
            {
                results.Add(EnqueueResult.FromJson(item));
            }
            return results;
        }

        /// <summary>The job <paramref name="jid"/>.</summary>
        /// <exception cref="NotFoundException">there is none</exception>
        public async Task<Job> GetJobAsync(string jid, CancellationToken cancel = default(CancellationToken))
        {
            return Job.FromJson(await RequestAsync("GET", "/jobs/" + Segment(jid), null, null, 0, cancel).ConfigureAwait(false));
        }

        /// <summary>Cancel a waiting job (<c>Cancelled</c>), or ask a running one to stop (<c>CancelRequested</c>).</summary>
        public async Task<CancelResult> CancelAsync(string jid, CancellationToken cancel = default(CancellationToken))
        {
            return CancelResult.FromJson(await RequestAsync("POST", "/jobs/" + Segment(jid) + "/cancel", new JsonObject(), null, 0, cancel).ConfigureAwait(false));
        }

        /// <summary>Make a dead letter (or a scheduled job) due now; needs the <c>admin</c> scope. Answers whether it was.</summary>
        /// <exception cref="ForbiddenException">without the admin scope</exception>
        public async Task<bool> RetryAsync(string jid, CancellationToken cancel = default(CancellationToken))
        {
            return J.Bool(J.Obj(await RequestAsync("POST", "/jobs/" + Segment(jid) + "/retry", new JsonObject(), null, 0, cancel).ConfigureAwait(false)), "retried");
        }

        // The worker protocol -----------------------------------------------------

        /// <summary>Register (or refresh) a worker process; answers its lease and heartbeat, ms.</summary>
        public async Task<Registration> RegisterAsync(RegisterOptions options, CancellationToken cancel = default(CancellationToken))
        {
            return Registration.FromJson(await RequestAsync("POST", "/worker/register", options.ToJson(), null, 0, cancel).ConfigureAwait(false));
        }

        /// <summary>
        /// Claim up to <c>Limit</c> due jobs, waiting up to <c>WaitMs</c> for one (empty: none came).
        /// Cancelling abandons the request: jobs the gateway had claimed come back when their lease expires.
        /// </summary>
        public async Task<IList<ClaimedJob>> ClaimAsync(ClaimOptions options, CancellationToken cancel = default(CancellationToken))
        {
            JsonObject answer = J.Obj(await RequestAsync("POST", "/worker/claim", options.ToJson(), null, options.WaitMs ?? 0, cancel).ConfigureAwait(false));
            var jobs = new List<ClaimedJob>();
            foreach (JsonValue item in (JsonArray)J.Get(answer, "jobs"))
            {
                jobs.Add(ClaimedJob.FromJson(item));
            }
            return jobs;
        }

        /// <summary>Extend a claimed job's lease (by <paramref name="leaseMs"/>, or the site's <c>LEASE_MS</c>); answers whether it was asked to stop.</summary>
        /// <exception cref="LeaseLostException">the job is no longer held under that token</exception>
        public async Task<bool> HeartbeatAsync(string jid, string leaseToken, long? leaseMs = null, CancellationToken cancel = default(CancellationToken))
        {
            var body = new JsonObject();
            body["lease_token"] = leaseToken;
            Put.If(body, "lease_ms", leaseMs);
            return J.Bool(J.Obj(await RequestAsync("POST", "/worker/jobs/" + Segment(jid) + "/heartbeat", body, null, 0, cancel).ConfigureAwait(false)), "cancel_requested");
        }

        /// <summary>Report success with a JSON result; answers the stored status (<c>done</c>, or <c>init</c>).</summary>
        /// <exception cref="LeaseLostException">the job is no longer held: drop the outcome</exception>
        public async Task<string> CompleteAsync(string jid, string leaseToken, JsonValue result, CancellationToken cancel = default(CancellationToken))
        {
            var body = new JsonObject();
            body["lease_token"] = leaseToken;
            body["result"] = result;
            return J.Str(J.Obj(await RequestAsync("POST", "/worker/jobs/" + Segment(jid) + "/complete", body, null, 0, cancel).ConfigureAwait(false)), "status");
        }

        /// <summary>Report a failed attempt; answers the stored status (<c>retry</c>, <c>max_retry</c>, <c>error</c>, <c>cancelled</c>, <c>init</c>).</summary>
        /// <exception cref="LeaseLostException">the job is no longer held: drop the outcome</exception>
        public async Task<string> FailAsync(string jid, string leaseToken, FailOptions options = null, CancellationToken cancel = default(CancellationToken))
        {
            var body = new JsonObject();
            body["lease_token"] = leaseToken;
            if (options != null) options.WriteTo(body);
            return J.Str(J.Obj(await RequestAsync("POST", "/worker/jobs/" + Segment(jid) + "/fail", body, null, 0, cancel).ConfigureAwait(false)), "status");
        }

        /// <summary>Mark a registered worker stopped (a clean exit); false if it already was.</summary>
        /// <exception cref="NotFoundException">a name no gateway worker registered</exception>
        public async Task<bool> StopWorkerAsync(string name, CancellationToken cancel = default(CancellationToken))
        {
            var body = new JsonObject();
            body["name"] = name;
            return J.Bool(J.Obj(await RequestAsync("POST", "/worker/stop", body, null, 0, cancel).ConfigureAwait(false)), "stopped");
        }

        // Requests ----------------------------------------------------------------

        /// <summary>One request to the gateway.</summary>
        /// <param name="method">the HTTP method</param>
        /// <param name="path">below <c>/sdk</c>, starting with <c>/</c>, already percent-encoded</param>
        /// <param name="body">the JSON body, or null for none</param>
        /// <param name="query">query parameters, or null</param>
        /// <param name="extraMs">ms added to the timeout (a claim's wait)</param>
        /// <param name="cancel">cancels the request (an <see cref="OperationCanceledException"/>)</param>
        /// <returns>the decoded JSON answer (null for an empty or JSON-null answer)</returns>
        public async Task<JsonValue> RequestAsync(string method, string path, JsonValue body,
            IEnumerable<KeyValuePair<string, string>> query, long extraMs, CancellationToken cancel)
        {
            var url = new StringBuilder(BaseUrl).Append(path);
            if (query != null)
            {
                string text = string.Join("&", query.Where(p => p.Value != null)
                    .Select(p => Segment(p.Key) + "=" + Segment(p.Value)));
                if (text.Length > 0) url.Append('?').Append(text);
            }
            using (var request = new HttpRequestMessage(new HttpMethod(method), url.ToString()))
            using (var deadline = CancellationTokenSource.CreateLinkedTokenSource(cancel))
            {
                if (body != null)
                {
                    request.Content = new StringContent(body.ToString(), Encoding.UTF8, "application/json");
                }
                TimeSpan limit = timeout + TimeSpan.FromMilliseconds(extraMs);
                deadline.CancelAfter(limit);
                HttpResponseMessage response;
                string text;
                try
                {
                    response = await http.SendAsync(request, deadline.Token).ConfigureAwait(false);
                    text = await response.Content.ReadAsStringAsync().ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    if (cancel.IsCancellationRequested) throw;
                    throw GatewayException.Unreachable("timeout",
                        string.Format(CultureInfo.InvariantCulture, "no answer from {0} within {1} ms", url, (long)limit.TotalMilliseconds));
                }
                catch (HttpRequestException e)
                {
                    throw GatewayException.Unreachable("connection_failed", "cannot reach " + url + ": " + Describe(e));
                }
                using (response)
                {
                    JsonValue parsed = null;
                    bool isJson = false;
                    if (!string.IsNullOrEmpty(text))
                    {
                        try
                        {
                            parsed = JsonValue.Parse(text);
                            isJson = true;
                        }
                        catch (Exception e) when (e is ArgumentException || e is FormatException || e is InvalidOperationException)
                        {
                            parsed = null;
                        }
                    }
                    int status = (int)response.StatusCode;
                    if (status < 200 || status >= 300)
                    {
                        string retryAfter = response.Headers.RetryAfter == null ? null
                            : response.Headers.RetryAfter.Delta.HasValue
                                ? response.Headers.RetryAfter.Delta.Value.TotalSeconds.ToString(CultureInfo.InvariantCulture)
                                : null;
                        throw GatewayException.Of(status, parsed, text, retryAfter);
                    }
                    if (!isJson && !string.IsNullOrEmpty(text))
                    {
                        throw GatewayException.Of(status, null, "the answer is not JSON: " + text, null);
                    }
                    return parsed;
                }
            }
        }

        static string Describe(Exception e)
        {
            var parts = new List<string>();
            for (Exception x = e; x != null; x = x.InnerException) parts.Add(x.Message);
            return string.Join(": ", parts);
        }

        static JsonObject JobBody(string jobType, JsonValue payload, EnqueueOptions options)
        {
            var body = new JsonObject();
            body["job_type"] = jobType;
            body["payload"] = payload;
            if (options != null) options.WriteTo(body);
            return body;
        }

        /// <summary>A path segment, percent-encoded (<c>/</c> too).</summary>
        internal static string Segment(string text)
        {
            return Uri.EscapeDataString(text);
        }

        /// <summary>The id verbs of one queue's jobs: a job holding an id is added, set, updated, cancelled and read by it.</summary>
        public sealed class IdVerbs
        {
            readonly JobQueueClient client;

            internal IdVerbs(JobQueueClient client)
            {
                this.client = client;
            }

            /// <summary>Add a job holding <paramref name="id"/> unless one holds it (false then, no error).</summary>
            public async Task<bool> AddAsync(string queue, string id, IdValue value = null, CancellationToken cancel = default(CancellationToken))
            {
                return J.Bool(J.Obj(await Post(queue, id, "add", value, cancel).ConfigureAwait(false)), "added");
            }

            /// <summary>Make the job holding <paramref name="id"/> have this value and time, creating it if need be.</summary>
            public async Task<bool> SetAsync(string queue, string id, IdValue value = null, CancellationToken cancel = default(CancellationToken))
            {
                return J.Bool(J.Obj(await Post(queue, id, "set", value, cancel).ConfigureAwait(false)), "set");
            }

            /// <summary>Change the scheduled or waiting job holding <paramref name="id"/> (false when there is none).</summary>
            public async Task<bool> UpdateAsync(string queue, string id, IdValue value = null, CancellationToken cancel = default(CancellationToken))
            {
                return J.Bool(J.Obj(await Post(queue, id, "update", value, cancel).ConfigureAwait(false)), "updated");
            }

            /// <summary>Remove the waiting job holding <paramref name="id"/>, or ask a running one to stop.</summary>
            public async Task<bool> CancelAsync(string queue, string id, CancellationToken cancel = default(CancellationToken))
            {
                return J.Bool(J.Obj(await client.RequestAsync("POST", Path(queue, id) + "/cancel", new JsonObject(), null, 0, cancel).ConfigureAwait(false)), "cancelled");
            }

            /// <summary>The job holding <paramref name="id"/>, or null when the id is free.</summary>
            public async Task<IdJob> GetAsync(string queue, string id, CancellationToken cancel = default(CancellationToken))
            {
                try
                {
                    return IdJob.FromJson(await client.RequestAsync("GET", Path(queue, id), null, null, 0, cancel).ConfigureAwait(false));
                }
                catch (NotFoundException)
                {
                    return null;
                }
            }

            /// <summary>One page of the queue's jobs, by id prefix and state; pass <c>Next</c> as the cursor.</summary>
            public async Task<Page> ListAsync(string queue, ListOptions options = null, CancellationToken cancel = default(CancellationToken))
            {
                return Page.FromJson(await client.RequestAsync("GET", "/queues/" + Segment(queue) + "/jobs", null,
                    options == null ? null : options.Query(), 0, cancel).ConfigureAwait(false));
            }

            Task<JsonValue> Post(string queue, string id, string verb, IdValue value, CancellationToken cancel)
            {
                return client.RequestAsync("POST", Path(queue, id) + "/" + verb, (value ?? new IdValue()).ToJson(), null, 0, cancel);
            }

            static string Path(string queue, string id)
            {
                return "/queues/" + Segment(queue) + "/ids/" + string.Join("/", id.Split('/').Select(Segment));
            }
        }
    }
}
