package org.djangojobqueue.client;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.StringJoiner;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * A client of the django-jobqueue HTTP gateway (docs/gateway.md, "Routes"): the producer
 * calls (enqueue, batches, the id verbs, a job by jid, cancel, retry) and the worker
 * protocol's calls, which {@link Worker} drives.
 *
 * <p>Every call returns the documented answer or throws a {@link GatewayException}
 * subclass: one per error code, and {@link GatewayException.Unreachable} when no answer
 * came. Thread-safe: share one client between threads.
 */
public final class Client {
    /** The client's version, sent at registration. */
    public static final String VERSION = "0.1.0";

    private final String baseUrl;
    private final String token;
    private final Duration timeout;
    private final HttpClient http;
    private final Ids ids;

    /**
     * A client with a 30 s per-request timeout.
     *
     * @param url the site's root ({@code http://127.0.0.1:8000}) or the gateway's ({@code .../sdk})
     * @param token a bearer token, {@code jqt_...} ({@code manage.py jobqueue token create})
     * @throws IllegalArgumentException when the url or the token is empty
     */
    public Client(String url, String token) {
        this(url, token, Duration.ofSeconds(30));
    }

    /**
     * @param url the site's root or the gateway's
     * @param token a bearer token
     * @param timeout a request's time limit, beyond a claim's own wait
     */
    public Client(String url, String token, Duration timeout) {
        if (url == null || url.isBlank()) {
            throw new IllegalArgumentException("Client: url is required (the site's root, e.g. http://127.0.0.1:8000)");
        }
        if (token == null || token.isBlank()) {
            throw new IllegalArgumentException("Client: token is required (manage.py jobqueue token create)");
        }
        String root = url.replaceAll("/+$", "");
        this.baseUrl = root.endsWith("/sdk") ? root : root + "/sdk";
        this.token = token;
        this.timeout = Objects.requireNonNull(timeout, "timeout");
        this.http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10))
                .build();
        this.ids = new Ids(this);
    }

    /** The gateway's root, ending in {@code /sdk}. */
    public String baseUrl() {
        return baseUrl;
    }

    /** The id verbs: {@code client.ids().add("reports", "user/42", new IdValue().value(1))}. */
    public Ids ids() {
        return ids;
    }

    // Producer calls ----------------------------------------------------------

    /**
     * Enqueue one job.
     *
     * @param jobType the job type, e.g. {@code emails.send}
     * @param payload any JSON-serialisable value, or null
     * @param options its options, or null for the defaults
     * @return {@code enqueued} (201) with the new jid, or {@code deduplicated} (200) with the holder's
     * @throws GatewayException.InvalidRequest an invalid option ({@code field} names it)
     * @throws GatewayException.DuplicateJob the id is held ({@code jid} is the holder's)
     * @throws GatewayException.ProRequired a Pro unique mode without a licence
     */
    public EnqueueResult enqueue(String jobType, Object payload, EnqueueOptions options) {
        return convert(request("POST", "/jobs", jobBody(jobType, payload, options), null, 0), EnqueueResult.class);
    }

    /** Enqueue one job with the default options. */
    public EnqueueResult enqueue(String jobType, Object payload) {
        return enqueue(jobType, payload, null);
    }

    /**
     * Enqueue up to {@code MAX_BATCH} (1000) jobs, all or nothing: one refused job refuses
     * the batch ({@link GatewayException#index()} names it) and nothing is stored.
     *
     * @return one answer per job, in order; a deduplicated job is an answer in its slot
     */
    public List<EnqueueResult> enqueueBatch(List<JobSpec> jobs) {
        ObjectNode body = Json.MAPPER.createObjectNode();
        ArrayNode array = body.putArray("jobs");
        for (JobSpec job : jobs) {
            array.add(jobBody(job.jobType(), job.payload(), job.options()));
        }
        JsonNode answer = request("POST", "/jobs/batch", body, null, 0);
        return convert(answer.path("results"), new TypeReference<List<EnqueueResult>>() {});
    }

    /**
     * The job {@code jid}.
     *
     * @throws GatewayException.NotFound when there is none
     */
    public Job getJob(String jid) {
        return convert(request("GET", "/jobs/" + segment(jid), null, null, 0), Job.class);
    }

    /** Cancel a waiting job ({@code cancelled}), or ask a running one to stop ({@code cancelRequested}). */
    public CancelResult cancel(String jid) {
        return convert(request("POST", "/jobs/" + segment(jid) + "/cancel", Json.MAPPER.createObjectNode(), null, 0),
                CancelResult.class);
    }

    /**
     * Make a dead letter (or a scheduled job) due now; needs the {@code admin} scope.
     *
     * @return whether it was made due
     * @throws GatewayException.Forbidden without the admin scope
     */
    public boolean retry(String jid) {
        return request("POST", "/jobs/" + segment(jid) + "/retry", Json.MAPPER.createObjectNode(), null, 0)
                .path("retried").asBoolean();
    }

    // The worker protocol -----------------------------------------------------

    /** Register (or refresh) a worker process; answers its lease and heartbeat interval, ms. */
    public Registration register(RegisterOptions options) {
        return convert(request("POST", "/worker/register", options.toJson(), null, 0), Registration.class);
    }

    /**
     * Claim up to {@code limit} due jobs, waiting up to {@code waitMs} for one.
     *
     * @return the claimed jobs (empty when none came within the wait)
     */
    public List<ClaimedJob> claim(ClaimOptions options) {
        return claimed(request("POST", "/worker/claim", options.toJson(), null, options.waitMsOrZero()));
    }

    /**
     * {@link #claim} without blocking: cancelling the future abandons the request (its jobs,
     * if the gateway had claimed any, come back when their lease expires).
     *
     * @return a future completing with the jobs, or exceptionally with a {@link GatewayException}
     */
    public CompletableFuture<List<ClaimedJob>> claimAsync(ClaimOptions options) {
        HttpRequest request = build("POST", "/worker/claim", options.toJson(), null, options.waitMsOrZero());
        return http.sendAsync(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8))
                .handle((response, error) -> {
                    if (error != null) {
                        Throwable cause = error instanceof CompletionException && error.getCause() != null
                                ? error.getCause() : error;
                        if (cause instanceof CancellationException) {
                            throw (CancellationException) cause;
                        }
                        throw transportError(request, cause);
                    }
                    return claimed(decode(response));
                });
    }

    /**
     * Extend a claimed job's lease.
     *
     * @param leaseMs the new lease, ms, or null for the site's {@code LEASE_MS}
     * @return whether the job was asked to stop (then report it failed with {@code cancelled})
     * @throws GatewayException.LeaseLost when the job is no longer held under that token
     */
    public boolean heartbeat(String jid, String leaseToken, Long leaseMs) {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.put("lease_token", leaseToken);
        Json.putIf(body, "lease_ms", leaseMs);
        return request("POST", "/worker/jobs/" + segment(jid) + "/heartbeat", body, null, 0)
                .path("cancel_requested").asBoolean();
    }

    /**
     * Report success with a JSON result.
     *
     * @return the stored status: {@code done}, or {@code init} when an id's {@code set} asked for one run more
     * @throws GatewayException.LeaseLost when the job is no longer held: drop the outcome
     */
    public String complete(String jid, String leaseToken, Object result) {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.put("lease_token", leaseToken);
        body.set("result", Json.MAPPER.valueToTree(result));
        return request("POST", "/worker/jobs/" + segment(jid) + "/complete", body, null, 0).path("status").asText();
    }

    /**
     * Report a failed attempt.
     *
     * @return the stored status: {@code retry}, {@code max_retry}, {@code error}, {@code cancelled} or {@code init}
     * @throws GatewayException.LeaseLost when the job is no longer held: drop the outcome
     */
    public String fail(String jid, String leaseToken, FailOptions options) {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.put("lease_token", leaseToken);
        if (options != null) {
            options.writeTo(body);
        }
        return request("POST", "/worker/jobs/" + segment(jid) + "/fail", body, null, 0).path("status").asText();
    }

    /**
     * Mark a registered worker stopped (a clean exit).
     *
     * @return false if it was stopped already
     * @throws GatewayException.NotFound for a name no gateway worker registered
     */
    public boolean stopWorker(String name) {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.put("name", name);
        return request("POST", "/worker/stop", body, null, 0).path("stopped").asBoolean();
    }

    // Requests ----------------------------------------------------------------

    /**
     * One request to the gateway.
     *
     * @param method the HTTP method
     * @param path below {@code /sdk}, starting with {@code /}, already percent-encoded
     * @param body the JSON body, or null for none
     * @param query query parameters (null values are left out), or null
     * @param extraTimeoutMs ms added to the client's timeout (a claim's wait)
     * @return the decoded JSON answer
     * @throws GatewayException a subclass per error code on any non-2xx answer, or
     *     {@link GatewayException.Unreachable} when none came
     */
    public JsonNode request(String method, String path, JsonNode body, Map<String, String> query, long extraTimeoutMs) {
        HttpRequest request = build(method, path, body, query, extraTimeoutMs);
        HttpResponse<String> response;
        try {
            response = http.send(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw transportError(request, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw GatewayException.unreachable("interrupted", "interrupted waiting for " + request.uri());
        }
        return decode(response);
    }

    private HttpRequest build(String method, String path, JsonNode body, Map<String, String> query, long extraTimeoutMs) {
        StringBuilder url = new StringBuilder(baseUrl).append(path);
        if (query != null) {
            StringJoiner params = new StringJoiner("&");
            for (Map.Entry<String, String> entry : query.entrySet()) {
                if (entry.getValue() != null) {
                    params.add(segment(entry.getKey()) + "=" + segment(entry.getValue()));
                }
            }
            if (params.length() > 0) {
                url.append('?').append(params);
            }
        }
        HttpRequest.Builder builder = HttpRequest.newBuilder(URI.create(url.toString()))
                .timeout(timeout.plusMillis(extraTimeoutMs))
                .header("Authorization", "Bearer " + token)
                .header("Accept", "application/json");
        if (body == null) {
            builder.method(method, HttpRequest.BodyPublishers.noBody());
        } else {
            String text;
            try {
                text = Json.MAPPER.writeValueAsString(body);
            } catch (IOException e) {
                throw new IllegalArgumentException("the request body is not JSON-serialisable: " + e.getMessage(), e);
            }
            builder.header("Content-Type", "application/json")
                    .method(method, HttpRequest.BodyPublishers.ofString(text, StandardCharsets.UTF_8));
        }
        return builder.build();
    }

    private static JsonNode decode(HttpResponse<String> response) {
        String text = response.body() == null ? "" : response.body();
        JsonNode parsed = null;
        if (!text.isEmpty()) {
            try {
                parsed = Json.MAPPER.readTree(text);
            } catch (JsonProcessingException e) {
                parsed = null;
            }
        }
        int status = response.statusCode();
        if (status < 200 || status >= 300) {
            throw GatewayException.of(status, parsed, text, response.headers().firstValue("Retry-After").orElse(null));
        }
        if (parsed == null) {
            if (!text.isEmpty()) {
                throw GatewayException.of(status, null, "the answer is not JSON: " + text, null);
            }
            return Json.MAPPER.nullNode();
        }
        return parsed;
    }

    private GatewayException transportError(HttpRequest request, Throwable error) {
        if (error instanceof GatewayException) {
            return (GatewayException) error;
        }
        if (error instanceof HttpTimeoutException) {
            return GatewayException.unreachable("timeout",
                    "no answer from " + request.uri() + " within " + request.timeout().map(Duration::toMillis).orElse(0L) + " ms");
        }
        String what = error instanceof ConnectException ? "cannot reach " : "failed talking to ";
        return GatewayException.unreachable("connection_failed",
                what + request.uri() + ": " + (error.getMessage() != null ? error.getMessage() : error.getClass().getName()));
    }

    private static ObjectNode jobBody(String jobType, Object payload, EnqueueOptions options) {
        ObjectNode body = Json.MAPPER.createObjectNode();
        body.put("job_type", jobType);
        body.set("payload", Json.MAPPER.valueToTree(payload));
        if (options != null) {
            options.writeTo(body);
        }
        return body;
    }

    private static List<ClaimedJob> claimed(JsonNode answer) {
        return new ArrayList<>(convert(answer.path("jobs"), new TypeReference<List<ClaimedJob>>() {}));
    }

    static <T> T convert(JsonNode node, Class<T> type) {
        try {
            return Json.MAPPER.treeToValue(node, type);
        } catch (JsonProcessingException | IllegalArgumentException e) {
            throw new IllegalStateException("the gateway's answer is not a " + type.getSimpleName() + ": " + node, e);
        }
    }

    static <T> T convert(JsonNode node, TypeReference<T> type) {
        try {
            return Json.MAPPER.readerFor(type).readValue(node);
        } catch (IOException | IllegalArgumentException e) {
            throw new IllegalStateException("the gateway's answer is not of the documented shape: " + node, e);
        }
    }

    /** A path segment, percent-encoded (a space is {@code %20}, a {@code /} is {@code %2F}). */
    static String segment(String text) {
        return URLEncoder.encode(text, StandardCharsets.UTF_8).replace("+", "%20");
    }
}
