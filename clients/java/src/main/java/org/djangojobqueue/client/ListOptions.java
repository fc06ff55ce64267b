package org.djangojobqueue.client;

import java.util.LinkedHashMap;
import java.util.Map;

/** The filters of {@link Ids#list}: id prefix, state, page size, and the cursor of a page. */
public final class ListOptions {
    private final Map<String, String> query = new LinkedHashMap<>();

    /** Only ids starting with this text. */
    public ListOptions prefix(String prefix) { query.put("prefix", prefix); return this; }

    /** Only jobs in this state: scheduled, waiting, running, failed, done, cancelled. */
    public ListOptions state(String state) { query.put("state", state); return this; }

    /** At most this many jobs on the page. */
    public ListOptions limit(int limit) { query.put("limit", Integer.toString(limit)); return this; }

    /** The page after a previous page's {@link Page#next()}. */
    public ListOptions cursor(String cursor) { query.put("cursor", cursor); return this; }

    Map<String, String> query() {
        return query;
    }
}
