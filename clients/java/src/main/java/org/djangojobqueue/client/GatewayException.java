package org.djangojobqueue.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * An error answer of the gateway, or no answer at all ({@link Unreachable}).
 *
 * <p>Every refusal is {@code {"error": code, "detail", "field", ...}} (docs/gateway.md,
 * "Errors"), thrown as the nested subclass of its code, so callers catch what they mean:
 *
 * <pre>{@code
 * try {
 *     client.enqueue("emails.send", payload, new EnqueueOptions().id("welcome/42"));
 * } catch (GatewayException.DuplicateJob e) {
 *     String holder = e.jid();
 * }
 * }</pre>
 *
 * <p>Unchecked: a gateway call can be made from a lambda or a handler without wrapping.
 */
public class GatewayException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final String detail;
    private final transient JsonNode body;
    private final Double retryAfter;

    /**
     * @param status the HTTP status; 0 when no answer came
     * @param body the JSON error body (its {@code error} and {@code detail} are read)
     * @param retryAfter seconds from the {@code Retry-After} header, or null
     */
    public GatewayException(int status, JsonNode body, Double retryAfter) {
        super(message(status, body));
        this.status = status;
        this.body = body == null ? JsonNodeFactory.instance.objectNode() : body;
        this.code = this.body.path("error").asText("gateway_error");
        this.detail = this.body.path("detail").asText("");
        this.retryAfter = retryAfter;
    }

    private static String message(int status, JsonNode body) {
        String code = body == null ? "gateway_error" : body.path("error").asText("gateway_error");
        String detail = body == null ? "" : body.path("detail").asText("");
        String field = body == null ? null : text(body, "field");
        return status + " " + code + ": " + detail + (field != null ? " (field " + field + ")" : "");
    }

    private static String text(JsonNode body, String name) {
        JsonNode value = body.get(name);
        return value == null || value.isNull() ? null : value.asText();
    }

    /** The HTTP status; 0 when the gateway did not answer. */
    public int status() {
        return status;
    }

    /** The body's {@code error} code, e.g. {@code invalid_request}, {@code lease_lost}. */
    public String code() {
        return code;
    }

    /** The body's sentence for people. */
    public String detail() {
        return detail;
    }

    /** The request field at fault ({@code priority}, {@code jobs[3].queue}), or null. */
    public String field() {
        return text(body, "field");
    }

    /** The refused job's position in a batch, or null. */
    public Integer index() {
        JsonNode value = body.get("index");
        return value != null && value.isInt() ? value.asInt() : null;
    }

    /** The package's own code of an {@code invalid_request} ({@code invalid_option}...), or null. */
    public String reason() {
        return text(body, "reason");
    }

    /** The scope a 403 lacked, or null. */
    public String scope() {
        return text(body, "scope");
    }

    /** The holder's jid of a 409 {@code duplicate_job}, or null. */
    public String jid() {
        return text(body, "jid");
    }

    /** Seconds to wait before trying again ({@code Retry-After} of a 429 or 503), or null. */
    public Double retryAfter() {
        return retryAfter;
    }

    /** The whole decoded error body (empty when the answer was not JSON). */
    public JsonNode body() {
        return body;
    }

    /** Whether trying again later may succeed: no answer, a 429 or a 503. */
    public boolean isRetryable() {
        return this instanceof Unreachable || this instanceof RateLimited || this instanceof ServiceUnavailable;
    }

    /**
     * The typed exception of an answer: by its {@code error} code, else by its status.
     *
     * @param status the HTTP status (0: no answer)
     * @param body the decoded body, or null when it was not a JSON error body
     * @param text the raw body, used as the detail when it was not JSON
     * @param retryAfter the {@code Retry-After} header's value, or null
     */
    public static GatewayException of(int status, JsonNode body, String text, String retryAfter) {
        if (body == null || !body.isObject() || !body.path("error").isTextual()) {
            ObjectNode generic = JsonNodeFactory.instance.objectNode();
            generic.put("error", "http_" + status);
            generic.put("detail", text == null ? "" : text.substring(0, Math.min(500, text.length())));
            body = generic;
        }
        Double wait = parseRetryAfter(retryAfter);
        switch (body.path("error").asText()) {
            case "bad_request": return new BadRequest(status, body, wait);
            case "invalid_request": return new InvalidRequest(status, body, wait);
            case "unauthorized": return new Unauthorized(status, body, wait);
            case "pro_required": return new ProRequired(status, body, wait);
            case "forbidden": return new Forbidden(status, body, wait);
            case "not_found": return new NotFound(status, body, wait);
            case "method_not_allowed": return new MethodNotAllowed(status, body, wait);
            case "duplicate_job": return new DuplicateJob(status, body, wait);
            case "lease_lost": return new LeaseLost(status, body, wait);
            case "body_too_large": return new BodyTooLarge(status, body, wait);
            case "not_json": return new NotJson(status, body, wait);
            case "rate_limited": return new RateLimited(status, body, wait);
            case "lock_timeout": return new LockTimeout(status, body, wait);
            case "database_unavailable": return new DatabaseUnavailable(status, body, wait);
            default: break;
        }
        switch (status) {
            case 400: return new BadRequest(status, body, wait);
            case 401: return new Unauthorized(status, body, wait);
            case 402: return new ProRequired(status, body, wait);
            case 403: return new Forbidden(status, body, wait);
            case 404: return new NotFound(status, body, wait);
            case 405: return new MethodNotAllowed(status, body, wait);
            case 413: return new BodyTooLarge(status, body, wait);
            case 415: return new NotJson(status, body, wait);
            case 422: return new InvalidRequest(status, body, wait);
            case 429: return new RateLimited(status, body, wait);
            case 502: case 503: case 504: return new ServiceUnavailable(status, body, wait);
            default: return new GatewayException(status, body, wait);
        }
    }

    /** An {@link Unreachable} for a failed connection or a timeout. */
    static Unreachable unreachable(String code, String detail) {
        ObjectNode body = JsonNodeFactory.instance.objectNode();
        body.put("error", code);
        body.put("detail", detail);
        return new Unreachable(0, body, null);
    }

    /** Seconds of a {@code Retry-After} header (a number; an HTTP date is not parsed), or null. */
    static Double parseRetryAfter(String value) {
        if (value == null || value.isBlank()) {
            return null;
        }
        try {
            return Math.max(0.0, Double.parseDouble(value.trim()));
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** No answer: the connection failed ({@code connection_failed}) or timed out ({@code timeout}). */
    public static class Unreachable extends GatewayException {
        private static final long serialVersionUID = 1L;
        Unreachable(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 400 {@code bad_request}: a path or query parameter is malformed; {@link #field()} names it. */
    public static class BadRequest extends GatewayException {
        private static final long serialVersionUID = 1L;
        BadRequest(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 422 {@code invalid_request}: a body field is invalid ({@link #field()}, {@link #index()}). */
    public static class InvalidRequest extends GatewayException {
        private static final long serialVersionUID = 1L;
        InvalidRequest(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 401 {@code unauthorized}: no token, or an unknown, revoked or expired one. */
    public static class Unauthorized extends GatewayException {
        private static final long serialVersionUID = 1L;
        Unauthorized(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 402 {@code pro_required}: a Pro unique mode or route without a valid licence. */
    public static class ProRequired extends GatewayException {
        private static final long serialVersionUID = 1L;
        ProRequired(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 403 {@code forbidden}: the token lacks the scope ({@link #scope()}) or the queue. */
    public static class Forbidden extends GatewayException {
        private static final long serialVersionUID = 1L;
        Forbidden(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 404 {@code not_found}: no such job, a free id, or no such route. */
    public static class NotFound extends GatewayException {
        private static final long serialVersionUID = 1L;
        NotFound(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 405 {@code method_not_allowed}: the route exists, not with this method. */
    public static class MethodNotAllowed extends GatewayException {
        private static final long serialVersionUID = 1L;
        MethodNotAllowed(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 409 {@code duplicate_job}: the id is held; {@link #jid()} is the holder's. */
    public static class DuplicateJob extends GatewayException {
        private static final long serialVersionUID = 1L;
        DuplicateJob(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 409 {@code lease_lost}: a report on a job no longer held under that lease token. */
    public static class LeaseLost extends GatewayException {
        private static final long serialVersionUID = 1L;
        LeaseLost(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 413 {@code body_too_large}: the body is over the gateway's {@code MAX_BODY_BYTES}. */
    public static class BodyTooLarge extends GatewayException {
        private static final long serialVersionUID = 1L;
        BodyTooLarge(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 415 {@code not_json}: the body was not JSON. */
    public static class NotJson extends GatewayException {
        private static final long serialVersionUID = 1L;
        NotJson(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 429 {@code rate_limited}: the token is over its rate; wait {@link #retryAfter()} seconds. */
    public static class RateLimited extends GatewayException {
        private static final long serialVersionUID = 1L;
        RateLimited(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 503: try again after {@link #retryAfter()} seconds. */
    public static class ServiceUnavailable extends GatewayException {
        private static final long serialVersionUID = 1L;
        ServiceUnavailable(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 503 {@code lock_timeout}: a creation lock timed out. */
    public static class LockTimeout extends ServiceUnavailable {
        private static final long serialVersionUID = 1L;
        LockTimeout(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }

    /** 503 {@code database_unavailable}: the gateway's database did not answer. */
    public static class DatabaseUnavailable extends ServiceUnavailable {
        private static final long serialVersionUID = 1L;
        DatabaseUnavailable(int status, JsonNode body, Double retryAfter) { super(status, body, retryAfter); }
    }
}
