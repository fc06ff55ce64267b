package org.djangojobqueue.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.IOException;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.djangojobqueue.client.Client;
import org.djangojobqueue.client.EnqueueOptions;
import org.djangojobqueue.client.EnqueueResult;
import org.djangojobqueue.client.Worker;

/**
 * The Java client's conformance runner (clients/conformance/README.md).
 *
 * <ul>
 *   <li>{@code run <dir>}: every scenario JSON of the directory, through the client's own
 *       calls; prints {@code ok NAME} or {@code not ok NAME: reason} per scenario and
 *       {@code N passed, N failed} last; exit status 0 iff all passed.
 *   <li>{@code worker}: the client's {@link Worker} on {@code JOBQUEUE_QUEUE} at
 *       {@code JOBQUEUE_CONCURRENCY} (default 4), handling {@code conformance.echo},
 *       {@code conformance.spawn} and {@code conformance.sleep}, until
 *       SIGTERM (it drains, then exits 0).
 * </ul>
 *
 * Environment: {@code JOBQUEUE_URL} (the gateway, {@code http://127.0.0.1:PORT/sdk}) and
 * {@code JOBQUEUE_TOKENS} (a JSON file mapping a token role to its token).
 */
public final class Conformance {
    private Conformance() {}

    public static void main(String[] args) {
        try {
            if (args.length == 2 && args[0].equals("run")) {
                System.exit(run(new File(args[1])));
            } else if (args.length == 1 && args[0].equals("worker")) {
                worker(); // no System.exit: a SIGTERM's shutdown hook is draining the worker
            } else {
                System.err.println("usage: conformance run <scenarios_dir> | worker");
                System.exit(2);
            }
        } catch (ScenarioError e) {
            System.err.println("conformance (java): " + e.getMessage());
            System.exit(2);
        }
    }

    static String env(String name) {
        String value = System.getenv(name);
        if (value == null || value.isBlank()) {
            throw new ScenarioError(name + " is not set");
        }
        return value;
    }

    static Map<String, String> tokens() {
        String path = env("JOBQUEUE_TOKENS");
        try {
            JsonNode node = Verbs.JSON.readTree(new File(path));
            Map<String, String> tokens = new HashMap<>();
            node.fields().forEachRemaining(entry -> tokens.put(entry.getKey(), entry.getValue().asText()));
            return tokens;
        } catch (IOException e) {
            throw new ScenarioError("cannot read JOBQUEUE_TOKENS " + path + ": " + e.getMessage());
        }
    }

    private static int run(File dir) {
        File[] files = dir.listFiles((d, name) -> name.endsWith(".json"));
        if (files == null || files.length == 0) {
            throw new ScenarioError("no scenario JSON in " + dir);
        }
        Arrays.sort(files);
        String url = env("JOBQUEUE_URL");
        Map<String, String> tokens = tokens();
        int passed = 0;
        int failed = 0;
        for (File file : files) {
            String name = file.getName().replaceAll("\\.json$", "");
            try {
                JsonNode scenario = Verbs.JSON.readTree(file);
                if (scenario.hasNonNull("name")) {
                    name = scenario.get("name").asText();
                }
                new Scenario(url, tokens, scenario).run();
                System.out.println("ok " + name);
                passed++;
            } catch (ScenarioError | IOException e) {
                System.out.println("not ok " + name + ": " + oneLine(e.getMessage()));
                failed++;
            } catch (RuntimeException e) {
                System.out.println("not ok " + name + ": " + e.getClass().getName() + ": " + oneLine(e.getMessage()));
                failed++;
            }
            System.out.flush();
        }
        System.out.println(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }

    private static String oneLine(String text) {
        return text == null ? "" : text.replaceAll("\\s*\\n\\s*", " ");
    }

    /** The worker of the mixed drain: echoes each payload back with the language. */
    private static void worker() {
        String url = env("JOBQUEUE_URL");
        Map<String, String> tokens = tokens();
        String token = Scenario.workerToken(tokens);
        String queue = env("JOBQUEUE_QUEUE");
        String concurrency = System.getenv("JOBQUEUE_CONCURRENCY");
        int n = concurrency == null || concurrency.isBlank() ? 4 : Integer.parseInt(concurrency.trim());
        Client client = new Client(url, token);
        Worker.Handler echo = (payload, ctx) -> {
            ObjectNode result = Verbs.JSON.createObjectNode();
            result.put("lang", "java");
            result.set("payload", payload);
            return result;
        };
        // An enqueue from inside a handler, with the worker's own client.
        Worker.Handler spawn = (payload, ctx) -> {
            EnqueueResult child = ctx.client().enqueue(payload.path("job_type").asText(), payload.get("payload"),
                    new EnqueueOptions().queue(payload.path("queue").asText()));
            ObjectNode result = Verbs.JSON.createObjectNode();
            result.put("lang", "java");
            result.put("jid", child.jid());
            return result;
        };
        // A job that runs a while: the SIGTERM drain's.
        Worker.Handler sleep = (payload, ctx) -> {
            long ms = payload.path("ms").asLong();
            Thread.sleep(ms);
            ObjectNode result = Verbs.JSON.createObjectNode();
            result.put("lang", "java");
            result.put("slept", ms);
            return result;
        };
        Worker.Stats stats = new Worker(client,
                Map.of("conformance.echo", echo, "conformance.spawn", spawn, "conformance.sleep", sleep),
                new Worker.Options(List.of(queue)).concurrency(n)).run();
        System.err.println("conformance (java): worker stopped: " + stats);
    }
}
