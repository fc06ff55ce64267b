package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The id verbs of one queue's jobs (docs/gateway.md, "Routes": {@code /sdk/queues/{queue}/ids/{id}}):
 * a job holding an id is added, set, updated, cancelled and read by that id. An id may
 * contain {@code /}; each of its parts is percent-encoded.
 */
public final class Ids {
    private final Client client;

    Ids(Client client) {
        this.client = client;
    }

    /** Add a job holding {@code id} unless one holds it. @return false when one does (no error) */
    public boolean add(String queue, String id, IdValue value) {
        return post(queue, id, "add", value).path("added").asBoolean();
    }

    /** Make the job holding {@code id} have this value and time, creating it if need be. @return true */
    public boolean set(String queue, String id, IdValue value) {
        return post(queue, id, "set", value).path("set").asBoolean();
    }

    /** Change the scheduled or waiting job holding {@code id}. @return false when there is none */
    public boolean update(String queue, String id, IdValue value) {
        return post(queue, id, "update", value).path("updated").asBoolean();
    }

    /** Remove the waiting job holding {@code id}, or ask a running one to stop. @return whether one was */
    public boolean cancel(String queue, String id) {
        return client.request("POST", path(queue, id) + "/cancel", Json.MAPPER.createObjectNode(), null, 0)
                .path("cancelled").asBoolean();
    }

    /** The job holding {@code id}, or null when the id is free. */
    public IdJob get(String queue, String id) {
        try {
            return Client.convert(client.request("GET", path(queue, id), null, null, 0), IdJob.class);
        } catch (GatewayException.NotFound e) {
            return null;
        }
    }

    /** One page of the queue's jobs, by id prefix and state; pass {@link Page#next()} as the cursor. */
    public Page list(String queue, ListOptions options) {
        JsonNode answer = client.request("GET", "/queues/" + Client.segment(queue) + "/jobs", null,
                options == null ? null : options.query(), 0);
        return Client.convert(answer, Page.class);
    }

    private JsonNode post(String queue, String id, String verb, IdValue value) {
        return client.request("POST", path(queue, id) + "/" + verb,
                (value == null ? new IdValue() : value).toJson(), null, 0);
    }

    private static String path(String queue, String id) {
        StringBuilder path = new StringBuilder("/queues/").append(Client.segment(queue)).append("/ids/");
        String[] parts = id.split("/", -1);
        for (int i = 0; i < parts.length; i++) {
            if (i > 0) {
                path.append('/');
            }
            path.append(Client.segment(parts[i]));
        }
        return path.toString();
    }
}
