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

/** One scenario: its steps, run in order through the client, with the values they saved. */
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
            String verb = step.path("verb").asText("");
            try {
                step(step, verb);
            } catch (ScenarioError e) {
                throw new ScenarioError("step " + n + " (" + verb + "): " + e.getMessage());
            }
        }
    }

    private void step(JsonNode step, String verb) {
        Client client = client(step.path("token").asText("all"));
        JsonNode args = resolve(step.path("args").isMissingNode() ? Verbs.JSON.createObjectNode() : step.get("args"));
        JsonNode expectedError = step.get("error");
        JsonNode answer;
        try {
            answer = Verbs.call(client, verb, args);
        } catch (GatewayException e) {
            if (expectedError == null) {
                throw new ScenarioError("unexpected " + kind(e) + ": " + e.getMessage());
            }
            checkError(resolve(expectedError), e);
            if (step.hasNonNull("save")) {
                saved.set(step.get("save").asText(), error(e));
            }
            return;
        }
        if (expectedError != null) {
            throw new ScenarioError("expected " + expectedError + ", got the answer " + answer);
        }
        if (step.has("expect")) {
            String problem = mismatch(resolve(step.get("expect")), answer, "");
            if (problem != null) {
                throw new ScenarioError(problem + " in " + answer);
            }
        }
        if (step.hasNonNull("save")) {
            saved.set(step.get("save").asText(), answer);
        }
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
        if (expected.hasNonNull("class") && !expected.get("class").asText().equals(kind(e))) {
            throw new ScenarioError("expected " + expected.get("class").asText() + ", got " + kind(e) + ": " + e.getMessage());
        }
        String problem = mismatch(expected, error(e), "");
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
