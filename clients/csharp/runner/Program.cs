using System;
using System.Collections.Generic;
using System.IO;
using System.Json;
using System.Linq;
using System.Threading.Tasks;
using DjangoJobQueue.Client;

namespace DjangoJobQueue.Conformance
{
    /// <summary>
    /// The C# client's conformance runner (clients/conformance/README.md).
    /// <c>run &lt;dir&gt;</c>: every scenario JSON of the directory through the client's own calls;
    /// prints <c>ok NAME</c> or <c>not ok NAME: reason</c> per scenario and <c>N passed, N failed</c>
    /// last; exit status 0 iff all passed. <c>worker</c>: the client's Worker on
    /// <c>JOBQUEUE_QUEUE</c> at <c>JOBQUEUE_CONCURRENCY</c> (default 4), handling
    /// <c>conformance.echo</c>, <c>conformance.spawn</c> and <c>conformance.sleep</c>, until SIGTERM (it drains, then exits 0). Environment:
    /// <c>JOBQUEUE_URL</c> and <c>JOBQUEUE_TOKENS</c> (a JSON file mapping a token role to its token).
    /// </summary>
    static class Program
    {
        static int Main(string[] args)
        {
            try
            {
                if (args.Length == 2 && args[0] == "run") return Run(args[1]).GetAwaiter().GetResult();
                if (args.Length == 1 && args[0] == "worker") return RunWorker().GetAwaiter().GetResult();
                Console.Error.WriteLine("usage: conformance run <scenarios_dir> | worker");
                return 2;
            }
            catch (ScenarioError e)
            {
                Console.Error.WriteLine("conformance (csharp): " + e.Message);
                return 2;
            }
        }

        static string Env(string name)
        {
            string value = Environment.GetEnvironmentVariable(name);
            if (string.IsNullOrWhiteSpace(value)) throw new ScenarioError(name + " is not set");
            return value;
        }

        static IDictionary<string, string> Tokens()
        {
            string path = Env("JOBQUEUE_TOKENS");
            JsonObject obj;
            try
            {
                obj = JsonValue.Parse(File.ReadAllText(path)) as JsonObject;
            }
            catch (Exception e)
            {
                throw new ScenarioError("cannot read JOBQUEUE_TOKENS " + path + ": " + e.Message);
            }
            if (obj == null) throw new ScenarioError("JOBQUEUE_TOKENS " + path + " is not an object");
            var tokens = new Dictionary<string, string>();
            foreach (var member in obj)
            {
                if (member.Value != null && member.Value.JsonType == JsonType.String) tokens[member.Key] = (string)member.Value;
            }
            return tokens;
        }

        static async Task<int> Run(string dir)
        {
            if (!Directory.Exists(dir)) throw new ScenarioError("no directory " + dir);
            string[] files = Directory.GetFiles(dir, "*.json").OrderBy(f => f, StringComparer.Ordinal).ToArray();
            if (files.Length == 0) throw new ScenarioError("no scenario JSON in " + dir);
            string url = Env("JOBQUEUE_URL");
            var tokens = Tokens();
            int passed = 0, failed = 0;
            foreach (string file in files)
            {
                string name = Path.GetFileNameWithoutExtension(file);
                try
                {
                    var scenario = JsonValue.Parse(File.ReadAllText(file)) as JsonObject;
                    if (scenario == null) throw new ScenarioError("the scenario is not a JSON object");
                    JsonValue title = Verbs.Get(scenario, "name");
                    if (title != null && title.JsonType == JsonType.String) name = (string)title;
                    await new Scenario(url, tokens).Run(scenario);
                    Console.WriteLine("ok " + name);
                    passed++;
                }
                catch (ScenarioError e)
                {
                    Console.WriteLine("not ok " + name + ": " + OneLine(e.Message));
                    failed++;
                }
                catch (Exception e)
                {
                    Console.WriteLine("not ok " + name + ": " + e.GetType().FullName + ": " + OneLine(e.Message));
                    failed++;
                }
            }
            Console.WriteLine(passed + " passed, " + failed + " failed");
            return failed == 0 ? 0 : 1;
        }

        static string OneLine(string text)
        {
            return (text ?? "").Replace("\r", " ").Replace("\n", " ");
        }

        /// <summary>The worker of the mixed drain: echoes each payload back with the language.</summary>
        static async Task<int> RunWorker()
        {
            string url = Env("JOBQUEUE_URL");
            string token = Scenario.WorkerToken(Tokens());
            string queue = Env("JOBQUEUE_QUEUE");
            string text = Environment.GetEnvironmentVariable("JOBQUEUE_CONCURRENCY");
            int concurrency = string.IsNullOrWhiteSpace(text) ? 4 : int.Parse(text.Trim());
            var handlers = new Dictionary<string, JobHandler>
            {
                {
                    "conformance.echo", (payload, ctx) =>
                    {
                        var result = new JsonObject();
                        result["lang"] = "csharp";
                        result["payload"] = payload;
                        return Task.FromResult<JsonValue>(result);
                    }
                },
                {
                    // An enqueue from inside a handler, with the worker's own client.
                    "conformance.spawn", async (payload, ctx) =>
                    {
                        var spec = (JsonObject)payload;
                        JsonValue childPayload = spec.ContainsKey("payload") ? spec["payload"] : null;
                        EnqueueResult child = await ctx.Client.EnqueueAsync(
                            (string)spec["job_type"], childPayload, new EnqueueOptions { Queue = (string)spec["queue"] });
                        var result = new JsonObject();
                        result["lang"] = "csharp";
                        result["jid"] = child.Jid;
                        return (JsonValue)result;
                    }
                },
                {
                    // A job that runs a while: the SIGTERM drain's.
                    "conformance.sleep", async (payload, ctx) =>
                    {
                        long ms = (long)payload["ms"];
                        await Task.Delay(TimeSpan.FromMilliseconds(ms));
                        var result = new JsonObject();
                        result["lang"] = "csharp";
                        result["slept"] = ms;
                        return (JsonValue)result;
                    }
                },
            };
            using (var client = new JobQueueClient(url, token))
            {
                var worker = new Worker(client, handlers, new WorkerOptions { Queues = new[] { queue }, Concurrency = concurrency });
                WorkerStats stats = await worker.RunAsync();
                Console.Error.WriteLine("conformance (csharp): worker stopped: " + stats);
            }
            return 0;
        }
    }
}
