package org.djangojobqueue.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.djangojobqueue.client.Client;
import org.djangojobqueue.client.GatewayException;

/**
 * One scenario: its steps, run in order through the client, with the values they saved.
 *
 * <p>A scenario is {"name", "steps": [step, ...]}; a step is
 * {"verb" (or "call", "op"), "args" ("with", "params", "input"): the gateway's field names,
 *  "token" ("as", "role"): a role of JOBQUEUE_TOKENS (default "all"),
 *  "expect" ("expected", "result"): a subset of the answer's JSON,
 *  "error" ("raises", "expect_error"): a class (DuplicateJob), a code (duplicate_job), or a
 *    subset of the error body plus "status", "class", "code",
 *  "save": a name for the answer (or the error), or {name: "path.in.answer"}}.
 * In args and expectations "$name.path" is a saved value and "${name.path}" interpolates one;
 * ${run} is unique to the run. Verbs: enqueue, enqueue_batch, get_job, cancel, retry,
 * ids.add|set|update|cancel|get|list, register, claim, heartbeat, complete, fail, stop_worker.
 */
final class Scenario {
    private static final Pattern REFERENCE = Pattern.compile("\\$\\{([^}]+)}");

    private final String url;
    private final Map<String, String> tokens;
    private final JsonNode scenario;
    private final Map<String, Client> clients = new HashMap<>();
    private final ObjectNode saved = Verbs.JSON.createObjectNode();

    Scenario(String url, Map<String, String> tokens, JsonNode scenario) {
        this.url = url;
        this.tokens = tokens;
        this.scenario = scenario;
        // ${run}: unique to this run, so a scenario's ids and queues never meet an earlier run's.
        saved.put("run", Long.toString(System.nanoTime(), 36) + Long.toString(ProcessHandle.current().pid(), 36));
    }

    /** The token the conformance worker uses: the {@code work} role's. */
    static String workerToken(Map<String, String> tokens) {
        for (String role : new String[] {"work", "worker", "all", "admin"}) {
            if (tokens.containsKey(role)) {
                return tokens.get(role);
            }
        }
        throw new ScenarioError("JOBQUEUE_TOKENS has no work token");
    }

    void run() {
        JsonNode steps = scenario.get("steps");
        if (steps == null || !steps.isArray()) {
            throw new ScenarioError("no steps");
        }
        int n = 0;
        for (JsonNode step : steps) {
            n++;
            String verb = verb(first(step, "verb", "call", "op").asText(""));
            try {
                step(step, verb);
            } catch (ScenarioError e) {
                throw new ScenarioError("step " + n + " (" + verb + "): " + e.getMessage());
            }
        }
    }

    /** A step's member under the first of its names that is present (missing node if none). */
    private static JsonNode first(JsonNode step, String... names) {
        for (String name : names) {
            if (step.has(name)) {
                return step.get(name);
            }
        }
        return com.fasterxml.jackson.databind.node.MissingNode.getInstance();
    }

    /** A verb's canonical name: {@code ids_add}, {@code id.add} are {@code ids.add}; {@code worker.claim} is {@code claim}. */
    static String verb(String name) {
        String verb = name.trim();
        if (verb.startsWith("worker.") || verb.startsWith("worker_")) {
            verb = verb.substring(7);
        }
        for (String prefix : new String[] {"ids_", "id_", "id.", "ids."}) {
            if (verb.startsWith(prefix)) {
                return "ids." + verb.substring(prefix.length());
            }
        }
        switch (verb) {
            case "get": return "get_job";
            case "batch": case "enqueue_many": return "enqueue_batch";
            case "stop": return "stop_worker";
            default: return verb;
        }
    }

    private void step(JsonNode step, String verb) {
        Client client = client(first(step, "token", "role", "as").asText("all"));
        JsonNode rawArgs = first(step, "args", "params", "with", "input");
        JsonNode args = resolve(rawArgs.isMissingNode() || rawArgs.isNull() ? Verbs.JSON.createObjectNode() : rawArgs);
        JsonNode errorNode = first(step, "error", "expect_error", "raises");
        JsonNode expectedError = errorNode.isMissingNode() || errorNode.isNull() ? null : errorNode;
        JsonNode answer;
        try {
            answer = Verbs.call(client, verb, args);
        } catch (GatewayException e) {
            if (expectedError == null) {
                throw new ScenarioError("unexpected " + kind(e) + ": " + e.getMessage());
            }
            checkError(resolve(expectedError), e);
            save(step, error(e));
            return;
        }
        if (expectedError != null) {
            throw new ScenarioError("expected " + expectedError + ", got the answer " + answer);
        }
        JsonNode expected = first(step, "expect", "expected", "result");
        if (!expected.isMissingNode()) {
            String problem = mismatch(resolve(expected), answer, "");
            if (problem != null) {
                throw new ScenarioError(problem + " in " + answer);
            }
        }
        save(step, answer);
    }

    /** {@code "save": "name"} keeps the whole answer; {@code "save": {"name": "path.in.answer"}} parts of it. */
    private void save(JsonNode step, JsonNode answer) {
        JsonNode save = step.get("save");
        if (save == null || save.isNull()) {
            return;
        }
        if (save.isTextual()) {
            saved.set(save.asText(), answer);
            return;
        }
        save.fields().forEachRemaining(entry -> {
            JsonNode node = answer;
            for (String part : entry.getValue().asText().replaceFirst("^\\$\\.?", "").split("\\.")) {
                if (part.isEmpty()) {
                    continue;
                }
                node = node != null && node.isArray() && part.matches("\\d+") ? node.get(Integer.parseInt(part))
                        : node == null ? null : node.get(part);
            }
            if (node == null) {
                throw new ScenarioError("nothing at " + entry.getValue().asText() + " to save in " + answer);
            }
            saved.set(entry.getKey(), node);
        });
    }

    private Client client(String role) {
        String token = tokens.get(role);
        if (token == null) {
            throw new ScenarioError("no token of role " + role + " in JOBQUEUE_TOKENS");
        }
        return clients.computeIfAbsent(role, r -> new Client(url, token));
    }

    private static String kind(GatewayException e) {
        return e.getClass().getSimpleName();
    }

    private static JsonNode error(GatewayException e) {
        ObjectNode body = e.body().deepCopy();
        body.put("status", e.status());
        body.put("class", kind(e));
        body.put("code", e.code());
        return body;
    }

    private static void checkError(JsonNode expected, GatewayException e) {
        if (expected.isTextual()) {
            // A class (DuplicateJob) or a code (duplicate_job).
            String want = expected.asText();
            if (!want.equals(kind(e)) && !want.equals(e.code()) && !want.equals(kind(e) + "Exception")) {
                throw new ScenarioError("expected " + want + ", got " + kind(e) + ": " + e.getMessage());
            }
            return;
        }
        JsonNode cls = expected.has("class") ? expected.get("class") : expected.get("type");
        if (cls != null && !cls.isNull() && !cls.asText().equals(kind(e))) {
            throw new ScenarioError("expected " + cls.asText() + ", got " + kind(e) + ": " + e.getMessage());
        }
        ObjectNode wanted = ((ObjectNode) expected).deepCopy();
        wanted.remove("class");
        wanted.remove("type");
        String problem = mismatch(wanted, error(e), "");
        if (problem != null) {
            throw new ScenarioError(problem + " in the error " + error(e));
        }
    }

    /** Why {@code actual} does not contain {@code expected}, or null when it does. */
    static String mismatch(JsonNode expected, JsonNode actual, String where) {
        if (expected.isObject()) {
            if (actual == null || !actual.isObject()) {
                return "expected an object at " + label(where) + ", got " + actual;
            }
            for (Iterator<Map.Entry<String, JsonNode>> it = expected.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> entry = it.next();
                String path = where.isEmpty() ? entry.getKey() : where + "." + entry.getKey();
                JsonNode value = actual.get(entry.getKey());
                if (value == null) {
                    return "no " + path;
                }
                String problem = mismatch(entry.getValue(), value, path);
                if (problem != null) {
                    return problem;
                }
            }
            return null;
        }
        if (expected.isArray()) {
            if (actual == null || !actual.isArray() || actual.size() != expected.size()) {
                return "expected " + expected.size() + " items at " + label(where) + ", got " + actual;
            }
            for (int i = 0; i < expected.size(); i++) {
                String problem = mismatch(expected.get(i), actual.get(i), where + "[" + i + "]");
                if (problem != null) {
                    return problem;
                }
            }
            return null;
        }
        if (expected.isNumber() && actual != null && actual.isNumber()) {
            return expected.decimalValue().compareTo(actual.decimalValue()) == 0 ? null
                    : label(where) + " is " + actual + ", expected " + expected;
        }
        return expected.equals(actual) ? null : label(where) + " is " + actual + ", expected " + expected;
    }

    private static String label(String where) {
        return where.isEmpty() ? "the answer" : where;
    }

    /** Replace {@code "$name.path"} strings with saved values and {@code ${name.path}} in text. */
    private JsonNode resolve(JsonNode node) {
        if (node.isTextual()) {
            String text = node.asText();
            if (text.startsWith("$") && !text.startsWith("${") && text.length() > 1) {
                return lookup(text.substring(1));
            }
            Matcher m = REFERENCE.matcher(text);
            StringBuilder out = new StringBuilder();
            while (m.find()) {
                JsonNode value = lookup(m.group(1));
                m.appendReplacement(out, Matcher.quoteReplacement(value.isTextual() ? value.asText() : value.toString()));
            }
            m.appendTail(out);
            return new TextNode(out.toString());
        }
        if (node.isObject()) {
            ObjectNode copy = Verbs.JSON.createObjectNode();
            node.fields().forEachRemaining(entry -> copy.set(entry.getKey(), resolve(entry.getValue())));
            return copy;
        }
        if (node.isArray()) {
            ArrayNode copy = Verbs.JSON.createArrayNode();
            node.forEach(item -> copy.add(resolve(item)));
            return copy;
        }
        return node;
    }

    private JsonNode lookup(String path) {
        JsonNode node = saved;
        for (String part : path.split("\\.")) {
            if (node.isArray() && part.matches("\\d+")) {
                node = node.get(Integer.parseInt(part));
            } else {
                node = node.get(part);
            }
            if (node == null) {
                throw new ScenarioError("nothing saved at " + path);
            }
        }
        return node;
    }
}
