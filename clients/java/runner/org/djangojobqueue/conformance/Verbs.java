package org.djangojobqueue.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import org.djangojobqueue.client.ClaimOptions;
import org.djangojobqueue.client.Client;
import org.djangojobqueue.client.EnqueueOptions;
import org.djangojobqueue.client.FailOptions;
import org.djangojobqueue.client.IdValue;
import org.djangojobqueue.client.JobSpec;
import org.djangojobqueue.client.ListOptions;
import org.djangojobqueue.client.RegisterOptions;

/**
 * The conformance suite's language-neutral verbs, each made through the Java client's own
 * call: arguments in the gateway's names (snake_case), answers as the gateway's JSON.
 */
final class Verbs {
    static final ObjectMapper JSON = new ObjectMapper();

    private static final Set<String> ENQUEUE_OPTIONS = Set.of("queue", "priority", "delay", "run_at", "expires_ms",
            "timeout_ms", "max_retry", "unique_key", "unique_mode", "unique_ttl_ms", "id", "limit_key", "batch", "after",
            "on_upstream_failure");

    private Verbs() {}

    /** The answer of {@code verb} with {@code args}, as JSON; a refusal throws its GatewayException. */
    static JsonNode call(Client client, String verb, JsonNode args) {
        switch (verb) {
            case "enqueue": {
                known(args, ENQUEUE_OPTIONS, "job_type", "payload", "options");
                return tree(client.enqueue(text(args, "job_type"), args.get("payload"), enqueueOptions(args)));
            }
            case "enqueue_batch": {
                known(args, Set.of(), "jobs");
                List<JobSpec> jobs = new ArrayList<>();
                for (JsonNode job : required(args, "jobs")) {
                    known(job, ENQUEUE_OPTIONS, "job_type", "payload", "options");
                    jobs.add(new JobSpec(text(job, "job_type"), job.get("payload"), enqueueOptions(job)));
                }
                ObjectNode answer = JSON.createObjectNode();
                answer.set("results", tree(client.enqueueBatch(jobs)));
                return answer;
            }
            case "get_job":
                known(args, Set.of(), "jid");
                return tree(client.getJob(text(args, "jid")));
            case "cancel":
                known(args, Set.of(), "jid");
                return tree(client.cancel(text(args, "jid")));
            case "retry": {
                known(args, Set.of(), "jid");
                ObjectNode answer = JSON.createObjectNode();
                answer.put("retried", client.retry(text(args, "jid")));
                return answer;
            }
            case "ids.add":
            case "ids.set":
            case "ids.update": {
                known(args, Set.of("value", "job_type", "at", "delay"), "queue", "id");
                String name = verb.substring(4);
                IdValue value = idValue(args);
                boolean result;
                if (name.equals("add")) {
                    result = client.ids().add(text(args, "queue"), text(args, "id"), value);
                } else if (name.equals("set")) {
                    result = client.ids().set(text(args, "queue"), text(args, "id"), value);
                } else {
                    result = client.ids().update(text(args, "queue"), text(args, "id"), value);
                }
                ObjectNode answer = JSON.createObjectNode();
                answer.put(name.equals("add") ? "added" : name.equals("set") ? "set" : "updated", result);
                return answer;
            }
            case "ids.cancel": {
                known(args, Set.of(), "queue", "id");
                ObjectNode answer = JSON.createObjectNode();
                answer.put("cancelled", client.ids().cancel(text(args, "queue"), text(args, "id")));
                return answer;
            }
            case "ids.get":
                known(args, Set.of(), "queue", "id");
                return tree(client.ids().get(text(args, "queue"), text(args, "id")));
            case "ids.list": {
                known(args, Set.of("prefix", "state", "limit", "cursor"), "queue");
                ListOptions options = new ListOptions();
                if (has(args, "prefix")) options.prefix(text(args, "prefix"));
                if (has(args, "state")) options.state(text(args, "state"));
                if (has(args, "limit")) options.limit(args.get("limit").asInt());
                if (has(args, "cursor")) options.cursor(text(args, "cursor"));
                return tree(client.ids().list(text(args, "queue"), options));
            }
            case "register": {
                known(args, Set.of("host", "pid", "languages", "job_types", "concurrency", "version"), "name", "queues");
                RegisterOptions options = new RegisterOptions(text(args, "name"), strings(required(args, "queues")));
                if (has(args, "host")) options.host(text(args, "host"));
                if (has(args, "pid")) options.pid(args.get("pid").asLong());
                if (has(args, "languages")) options.languages(strings(args.get("languages")));
                if (has(args, "job_types")) options.jobTypes(strings(args.get("job_types")));
                if (has(args, "concurrency")) options.concurrency(args.get("concurrency").asInt());
                if (has(args, "version")) options.version(text(args, "version"));
                return tree(client.register(options));
            }
            case "claim": {
                known(args, Set.of("job_types", "limit", "wait_ms", "worker", "lease_ms"), "queues");
                ClaimOptions options = new ClaimOptions(strings(required(args, "queues")));
                if (has(args, "job_types")) options.jobTypes(strings(args.get("job_types")));
                if (has(args, "limit")) options.limit(args.get("limit").asInt());
                if (has(args, "wait_ms")) options.waitMs(args.get("wait_ms").asLong());
                if (has(args, "worker")) options.worker(text(args, "worker"));
                if (has(args, "lease_ms")) options.leaseMs(args.get("lease_ms").asLong());
                ObjectNode answer = JSON.createObjectNode();
                answer.set("jobs", tree(client.claim(options)));
                return answer;
            }
            case "heartbeat": {
                known(args, Set.of("lease_ms"), "jid", "lease_token");
                Long leaseMs = has(args, "lease_ms") ? args.get("lease_ms").asLong() : null;
                ObjectNode answer = JSON.createObjectNode();
                answer.put("cancel_requested", client.heartbeat(text(args, "jid"), text(args, "lease_token"), leaseMs));
                return answer;
            }
            case "complete": {
                known(args, Set.of("result"), "jid", "lease_token");
                ObjectNode answer = JSON.createObjectNode();
                answer.put("status", client.complete(text(args, "jid"), text(args, "lease_token"), args.get("result")));
                return answer;
            }
            case "fail": {
                known(args, Set.of("error", "exception_class", "retry", "cancelled"), "jid", "lease_token");
                FailOptions options = new FailOptions();
                if (has(args, "error")) options.error(text(args, "error"));
                if (has(args, "exception_class")) options.exceptionClass(text(args, "exception_class"));
                if (has(args, "retry")) options.retry(args.get("retry").asBoolean());
                if (has(args, "cancelled")) options.cancelled(args.get("cancelled").asBoolean());
                ObjectNode answer = JSON.createObjectNode();
                answer.put("status", client.fail(text(args, "jid"), text(args, "lease_token"), options));
                return answer;
            }
            case "stop_worker": {
                known(args, Set.of(), "name");
                ObjectNode answer = JSON.createObjectNode();
                answer.put("name", text(args, "name"));
                answer.put("stopped", client.stopWorker(text(args, "name")));
                return answer;
            }
            default:
                throw new ScenarioError("unknown verb " + verb);
        }
    }

    private static EnqueueOptions enqueueOptions(JsonNode args) {
        JsonNode source = args.has("options") ? args.get("options") : args;
        EnqueueOptions options = new EnqueueOptions();
        if (has(source, "queue")) options.queue(text(source, "queue"));
        if (has(source, "priority")) options.priority(source.get("priority").asInt());
        if (has(source, "delay")) {
            JsonNode delay = source.get("delay");
            if (delay.isNumber()) options.delaySeconds(delay.asDouble()); else options.delay(delay.asText());
        }
        if (has(source, "run_at")) options.runAt(text(source, "run_at"));
        if (has(source, "expires_ms")) options.expiresMs(source.get("expires_ms").asLong());
        if (has(source, "timeout_ms")) options.timeoutMs(source.get("timeout_ms").asLong());
        if (has(source, "max_retry")) options.maxRetry(source.get("max_retry").asInt());
        if (has(source, "unique_key")) options.uniqueKey(text(source, "unique_key"));
        if (has(source, "unique_mode")) options.uniqueMode(text(source, "unique_mode"));
        if (has(source, "unique_ttl_ms")) options.uniqueTtlMs(source.get("unique_ttl_ms").asLong());
        if (has(source, "id")) options.id(text(source, "id"));
        if (has(source, "limit_key")) options.limitKey(text(source, "limit_key"));
        if (has(source, "batch")) options.batch(source.get("batch").asLong());
        if (has(source, "after")) {
            List<String> jids = new ArrayList<>();
            source.get("after").forEach(jid -> jids.add(jid.asText()));
            options.after(jids);
        }
        if (has(source, "on_upstream_failure")) options.onUpstreamFailure(text(source, "on_upstream_failure"));
        return options;
    }

    private static IdValue idValue(JsonNode args) {
        IdValue value = new IdValue();
        if (args.has("value")) value.value(args.get("value"));
        if (has(args, "job_type")) value.jobType(text(args, "job_type"));
        if (has(args, "at")) value.at(text(args, "at"));
        if (has(args, "delay")) {
            JsonNode delay = args.get("delay");
            if (delay.isNumber()) value.delaySeconds(delay.asDouble()); else value.delay(delay.asText());
        }
        return value;
    }

    /** Refuse an argument the verb does not take: a misspelt scenario fails loudly. */
    private static void known(JsonNode args, Set<String> optional, String... required) {
        Set<String> names = new java.util.HashSet<>(optional);
        names.addAll(List.of(required));
        for (Iterator<String> it = args.fieldNames(); it.hasNext(); ) {
            String name = it.next();
            if (!names.contains(name)) {
                throw new ScenarioError("unknown argument " + name);
            }
        }
    }

    private static boolean has(JsonNode args, String name) {
        return args.has(name) && !args.get(name).isNull();
    }

    private static JsonNode required(JsonNode args, String name) {
        if (!args.has(name)) {
            throw new ScenarioError("missing argument " + name);
        }
        return args.get(name);
    }

    private static String text(JsonNode args, String name) {
        JsonNode value = required(args, name);
        return value.isNull() ? null : value.asText();
    }

    private static List<String> strings(JsonNode array) {
        List<String> values = new ArrayList<>();
        for (JsonNode item : array) {
            values.add(item.asText());
        }
        return values;
    }

    static JsonNode tree(Object value) {
        return JSON.valueToTree(value);
    }
}
