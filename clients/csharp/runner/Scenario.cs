using System;
using System.Collections.Generic;
using System.Globalization;
using System.Json;
using System.Linq;
using System.Text;
using System.Threading.Tasks;
using DjangoJobQueue.Client;

namespace DjangoJobQueue.Conformance
{
    /// <summary>
    /// One scenario: its steps, run in order through the client, with the values they saved.
    /// A scenario is {"name", "steps": [step, ...]}; a step is
    /// {"verb" (or "call", "op"), "args" ("with", "params", "input"): the gateway's field names,
    ///  "token" ("as", "role"): a role of JOBQUEUE_TOKENS (default "all"),
    ///  "expect" ("expected", "result"): a subset of the answer's JSON,
    ///  "error" ("raises", "expect_error"): a class (DuplicateJob), a code (duplicate_job), or a
    ///    subset of the error body plus "status", "class", "code",
    ///  "save": a name for the answer (or the error), or {name: "path.in.answer"}}.
    /// In args and expectations "$name.path" is a saved value and "${name.path}" interpolates one;
    /// ${run} is unique to the run. Verbs: enqueue, enqueue_batch, get_job, cancel, retry,
    /// ids.add|set|update|cancel|get|list, register, claim, heartbeat, complete, fail, stop_worker.
    /// </summary>
    sealed class Scenario
    {
        readonly string url;
        readonly IDictionary<string, string> tokens;
        readonly Dictionary<string, JobQueueClient> clients = new Dictionary<string, JobQueueClient>();
        readonly JsonObject saved = new JsonObject();

        public Scenario(string url, IDictionary<string, string> tokens)
        {
            this.url = url;
            this.tokens = tokens;
            // ${run}: unique to this run, so a scenario's ids and queues never meet an earlier run's.
            saved["run"] = DateTime.UtcNow.Ticks.ToString("x", CultureInfo.InvariantCulture)
                + System.Diagnostics.Process.GetCurrentProcess().Id.ToString("x", CultureInfo.InvariantCulture);
        }

        /// <summary>The token the conformance worker uses: the <c>work</c> role's.</summary>
        public static string WorkerToken(IDictionary<string, string> tokens)
        {
            foreach (string role in new[] { "work", "worker", "all", "admin" })
            {
                if (tokens.ContainsKey(role)) return tokens[role];
            }
            throw new ScenarioError("JOBQUEUE_TOKENS has no work token");
        }

        public async Task Run(JsonObject scenario)
        {
            var steps = Verbs.Get(scenario, "steps") as JsonArray;
            if (steps == null) throw new ScenarioError("no steps");
            int n = 0;
            foreach (JsonValue item in steps)
            {
                n++;
                var step = item as JsonObject;
                string verb = step == null ? "" : CanonicalVerb(StrOf(First(step, "verb", "call", "op")) ?? "");
                try
                {
                    if (step == null) throw new ScenarioError("a step is not an object");
                    await Step(step, verb);
                }
                catch (ScenarioError e)
                {
                    throw new ScenarioError("step " + n + " (" + verb + "): " + e.Message);
                }
            }
        }

        /// <summary>A step's member under the first of its names that is present (null if none).</summary>
        static JsonValue First(JsonObject step, params string[] names)
        {
            foreach (string name in names)
            {
                if (step.ContainsKey(name)) return Verbs.Get(step, name);
            }
            return null;
        }

        static bool Has(JsonObject step, params string[] names)
        {
            return names.Any(step.ContainsKey);
        }

        /// <summary>A verb's canonical name: <c>ids_add</c>, <c>id.add</c> are <c>ids.add</c>; <c>worker.claim</c> is <c>claim</c>.</summary>
        public static string CanonicalVerb(string name)
        {
            string verb = name.Trim();
            if (verb.StartsWith("worker.", StringComparison.Ordinal) || verb.StartsWith("worker_", StringComparison.Ordinal)) verb = verb.Substring(7);
            foreach (string prefix in new[] { "ids_", "id_", "id.", "ids." })
            {
                if (verb.StartsWith(prefix, StringComparison.Ordinal)) return "ids." + verb.Substring(prefix.Length);
            }
            switch (verb)
            {
                case "get": return "get_job";
                case "batch": case "enqueue_many": return "enqueue_batch";
                case "stop": return "stop_worker";
                default: return verb;
            }
        }

        async Task Step(JsonObject step, string verb)
        {
            string role = StrOf(First(step, "token", "role", "as")) ?? "all";
            JsonValue argsValue = First(step, "args", "params", "with", "input");
            var args = argsValue == null ? new JsonObject() : Resolve(argsValue) as JsonObject;
            if (args == null) throw new ScenarioError("args is not an object");
            JsonValue errorValue = First(step, "error", "expect_error", "raises");
            JsonValue expectedError = errorValue == null ? null : Resolve(errorValue);
            JsonValue answer;
            try
            {
                answer = await Verbs.Call(Client(role), verb, args);
            }
            catch (GatewayException e)
            {
                if (expectedError == null) throw new ScenarioError("unexpected " + Kind(e) + ": " + e.Message);
                CheckError(expectedError, e);
                Save(step, ErrorJson(e));
                return;
            }
            if (expectedError != null)
                throw new ScenarioError("expected " + Verbs.J(expectedError) + ", got the answer " + Verbs.J(answer));
            if (Has(step, "expect", "expected", "result"))
            {
                string problem = Mismatch(Resolve(First(step, "expect", "expected", "result")), answer, "");
                if (problem != null) throw new ScenarioError(problem + " in " + Verbs.J(answer));
            }
            Save(step, answer);
        }

        /// <summary><c>"save": "name"</c> keeps the whole answer; <c>"save": {"name": "path.in.answer"}</c> parts of it.</summary>
        void Save(JsonObject step, JsonValue answer)
        {
            JsonValue save = Verbs.Get(step, "save");
            if (save == null) return;
            if (save.JsonType == JsonType.String)
            {
                saved[(string)save] = answer;
                return;
            }
            var names = save as JsonObject;
            if (names == null) return;
            foreach (var member in names)
            {
                string path = StrOf(member.Value) ?? "";
                JsonValue node = answer;
                foreach (string part in path.TrimStart('$').TrimStart('.').Split('.').Where(p => p.Length > 0))
                {
                    int index;
                    if (node is JsonArray && int.TryParse(part, NumberStyles.None, CultureInfo.InvariantCulture, out index))
                        node = index < ((JsonArray)node).Count ? ((JsonArray)node)[index] : null;
                    else if (node is JsonObject)
                        node = Verbs.Get((JsonObject)node, part);
                    else
                        node = null;
                    if (node == null) throw new ScenarioError("nothing at " + path + " to save in " + Verbs.J(answer));
                }
                saved[member.Key] = node;
            }
        }

        JobQueueClient Client(string role)
        {
            JobQueueClient client;
            if (clients.TryGetValue(role, out client)) return client;
            string token;
            if (!tokens.TryGetValue(role, out token)) throw new ScenarioError("no token of role " + role + " in JOBQUEUE_TOKENS");
            client = new JobQueueClient(url, token);
            clients[role] = client;
            return client;
        }

        static string Str(JsonObject obj, string name)
        {
            return StrOf(Verbs.Get(obj, name));
        }

        static string StrOf(JsonValue value)
        {
            return value != null && value.JsonType == JsonType.String ? (string)value : null;
        }

        /// <summary>The exception's class name without the Exception suffix: <c>DuplicateJob</c>.</summary>
        static string Kind(GatewayException e)
        {
            string name = e.GetType().Name;
            if (name == "GatewayUnreachableException") return "Unreachable";
            return name.EndsWith("Exception", StringComparison.Ordinal) ? name.Substring(0, name.Length - "Exception".Length) : name;
        }

        static JsonObject ErrorJson(GatewayException e)
        {
            var body = (JsonObject)JsonValue.Parse(e.Body.ToString());
            body["status"] = e.Status;
            body["class"] = Kind(e);
            body["code"] = e.Code;
            return body;
        }

        static void CheckError(JsonValue expected, GatewayException e)
        {
            if (expected.JsonType == JsonType.String)
            {
                // A class (DuplicateJob) or a code (duplicate_job).
                string want = (string)expected;
                if (want != Kind(e) && want != e.Code && want != e.GetType().Name)
                    throw new ScenarioError("expected " + want + ", got " + Kind(e) + ": " + e.Message);
                return;
            }
            var wanted = JsonValue.Parse(expected.ToString()) as JsonObject;
            if (wanted == null) throw new ScenarioError("an expected error is a class, a code or an object");
            string cls = Str(wanted, "class") ?? Str(wanted, "type");
            wanted.Remove("class");
            wanted.Remove("type");
            if (cls != null && cls != Kind(e))
                throw new ScenarioError("expected " + cls + ", got " + Kind(e) + ": " + e.Message);
            JsonObject actual = ErrorJson(e);
            string problem = Mismatch(wanted, actual, "");
            if (problem != null) throw new ScenarioError(problem + " in the error " + actual.ToString());
        }

        /// <summary>Why <paramref name="actual"/> does not contain <paramref name="expected"/>, or null when it does.</summary>
        static string Mismatch(JsonValue expected, JsonValue actual, string at)
        {
            string label = at.Length == 0 ? "the answer" : at;
            var want = expected as JsonObject;
            if (want != null)
            {
                var got = actual as JsonObject;
                if (got == null) return "expected an object at " + label + ", got " + Verbs.J(actual);
                foreach (var member in want)
                {
                    string path = at.Length == 0 ? member.Key : at + "." + member.Key;
                    if (!got.ContainsKey(member.Key)) return "no " + path;
                    string problem = Mismatch(member.Value, Verbs.Get(got, member.Key), path);
                    if (problem != null) return problem;
                }
                return null;
            }
            var wantItems = expected as JsonArray;
            if (wantItems != null)
            {
                var gotItems = actual as JsonArray;
                if (gotItems == null || gotItems.Count != wantItems.Count)
                    return "expected " + wantItems.Count + " items at " + label + ", got " + Verbs.J(actual);
                for (int i = 0; i < wantItems.Count; i++)
                {
                    string problem = Mismatch(wantItems[i], gotItems[i], at + "[" + i + "]");
                    if (problem != null) return problem;
                }
                return null;
            }
            if (expected != null && actual != null && expected.JsonType == JsonType.Number && actual.JsonType == JsonType.Number)
            {
                return (double)expected == (double)actual ? null : label + " is " + Verbs.J(actual) + ", expected " + Verbs.J(expected);
            }
            return Verbs.J(expected) == Verbs.J(actual) ? null : label + " is " + Verbs.J(actual) + ", expected " + Verbs.J(expected);
        }

        /// <summary>Replace <c>"$name.path"</c> strings with saved values and <c>${name.path}</c> in text.</summary>
        JsonValue Resolve(JsonValue value)
        {
            if (value == null) return null;
            switch (value.JsonType)
            {
                case JsonType.String:
                {
                    string text = (string)value;
                    if (text.StartsWith("$", StringComparison.Ordinal) && !text.StartsWith("${", StringComparison.Ordinal) && text.Length > 1)
                        return Lookup(text.Substring(1));
                    var out_ = new StringBuilder();
                    int at = 0;
                    while (true)
                    {
                        int start = text.IndexOf("${", at, StringComparison.Ordinal);
                        if (start < 0) break;
                        int end = text.IndexOf('}', start);
                        if (end < 0) throw new ScenarioError("unclosed reference in " + text);
                        out_.Append(text, at, start - at);
                        JsonValue found = Lookup(text.Substring(start + 2, end - start - 2));
                        out_.Append(found != null && found.JsonType == JsonType.String ? (string)found : Verbs.J(found));
                        at = end + 1;
                    }
                    out_.Append(text.Substring(at));
                    return new JsonPrimitive(out_.ToString());
                }
                case JsonType.Object:
                {
                    var copy = new JsonObject();
                    foreach (var member in (JsonObject)value) copy[member.Key] = Resolve(member.Value);
                    return copy;
                }
                case JsonType.Array:
                    return new JsonArray(((JsonArray)value).Select(Resolve));
                default:
                    return value;
            }
        }

        JsonValue Lookup(string path)
        {
            JsonValue node = saved;
            foreach (string part in path.Split('.'))
            {
                JsonValue next = null;
                int index;
                if (node is JsonArray && int.TryParse(part, NumberStyles.None, CultureInfo.InvariantCulture, out index))
                {
                    var items = (JsonArray)node;
                    next = index < items.Count ? items[index] : null;
                    if (next == null && index < items.Count) return null;
                }
                else if (node is JsonObject)
                {
                    var obj = (JsonObject)node;
                    if (obj.ContainsKey(part) && Verbs.Get(obj, part) == null) return null;
                    next = Verbs.Get(obj, part);
                }
                if (next == null) throw new ScenarioError("nothing saved at " + path);
                node = next;
            }
            return node;
        }
    }
}
