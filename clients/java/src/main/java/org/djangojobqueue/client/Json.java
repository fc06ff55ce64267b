package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/** The client's one Jackson mapper, and the helper that leaves unset options out of a body. */
final class Json {
    static final ObjectMapper MAPPER =
            new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    private Json() {}

    /** Put {@code value} under {@code name} unless it is null (the gateway then applies its default). */
    static void putIf(ObjectNode body, String name, Object value) {
        if (value != null) {
            body.set(name, MAPPER.valueToTree(value));
        }
    }
}
