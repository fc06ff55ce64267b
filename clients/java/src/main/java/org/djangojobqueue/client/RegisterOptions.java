package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;

/**
 * A worker's registration (docs/gateway.md, "The worker protocol"): its name and the
 * queues it serves are required; the console lists the rest.
 */
public final class RegisterOptions {
    private final String name;
    private final List<String> queues;
    private String host;
    private Long pid;
    private List<String> languages;
    private List<String> jobTypes;
    private Integer concurrency;
    private String version;

    /**
     * @param name the worker's name, unique per process
     * @param queues the queues it claims from (at least one)
     */
    public RegisterOptions(String name, List<String> queues) {
        this.name = name;
        this.queues = List.copyOf(queues);
    }

    public RegisterOptions host(String host) { this.host = host; return this; }

    public RegisterOptions pid(long pid) { this.pid = pid; return this; }

    public RegisterOptions languages(List<String> languages) { this.languages = List.copyOf(languages); return this; }

    public RegisterOptions jobTypes(List<String> jobTypes) { this.jobTypes = List.copyOf(jobTypes); return this; }

    public RegisterOptions concurrency(int concurrency) { this.concurrency = concurrency; return this; }

    public RegisterOptions version(String version) { this.version = version; return this; }

    ObjectNode toJson() {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.put("name", name);
        Json.putIf(body, "host", host);
        Json.putIf(body, "pid", pid);
        Json.putIf(body, "languages", languages);
        body.set("queues", Json.MAPPER.valueToTree(queues));
        Json.putIf(body, "job_types", jobTypes);
        Json.putIf(body, "concurrency", concurrency);
        Json.putIf(body, "version", version);
        return body;
    }
}
