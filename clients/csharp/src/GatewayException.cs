using System;
using System.Globalization;
using System.Json;

namespace DjangoJobQueue.Client
{
    /// <summary>
    /// An error answer of the gateway, or no answer (<see cref="GatewayUnreachableException"/>).
    /// Every refusal is <c>{"error": code, "detail", "field", ...}</c> (docs/gateway.md,
    /// "Errors"), thrown as the subclass of its code, so callers catch what they mean.
    /// </summary>
    public class GatewayException : Exception
    {
        /// <summary>The HTTP status; 0 when no answer came.</summary>
        public int Status { get; private set; }

        /// <summary>The body's <c>error</c> code, e.g. <c>invalid_request</c>.</summary>
        public string Code { get; private set; }

        /// <summary>The body's sentence for people.</summary>
        public string Detail { get; private set; }

        /// <summary>The request field at fault (<c>priority</c>, <c>jobs[3].queue</c>), or null.</summary>
        public string Field { get { return Text("field"); } }

        /// <summary>The refused job's position in a batch, or null.</summary>
        public int? Index
        {
            get
            {
                JsonValue value;
                if (Body.TryGetValue("index", out value) && value != null && value.JsonType == JsonType.Number)
                {
                    return (int)value;
                }
                return null;
            }
        }

        /// <summary>The package's own code of an <c>invalid_request</c>, or null.</summary>
        public string Reason { get { return Text("reason"); } }

        /// <summary>The holder's jid of a 409 <c>duplicate_job</c>, or null.</summary>
        public string Jid { get { return Text("jid"); } }

        /// <summary>The scope a 403 lacked, or null.</summary>
        public string Scope { get { return Text("scope"); } }

        /// <summary>Seconds to wait before trying again (<c>Retry-After</c> of a 429 or 503), or null.</summary>
        public double? RetryAfter { get; private set; }

        /// <summary>The whole decoded error body.</summary>
        public JsonObject Body { get; private set; }

        /// <summary>Whether trying again later may succeed: no answer, a 429 or a 503.</summary>
        public bool IsRetryable
        {
            get { return this is GatewayUnreachableException || this is RateLimitedException || this is ServiceUnavailableException; }
        }

        public GatewayException(int status, JsonObject body, double? retryAfter)
            : base(MessageOf(status, body))
        {
            Status = status;
            Body = body ?? new JsonObject();
            Code = TextOf(Body, "error") ?? "gateway_error";
            Detail = TextOf(Body, "detail") ?? "";
            RetryAfter = retryAfter;
        }

        string Text(string name)
        {
            return TextOf(Body, name);
        }

        static string TextOf(JsonObject body, string name)
        {
            JsonValue value;
            if (body != null && body.TryGetValue(name, out value) && value != null && value.JsonType == JsonType.String)
            {
                return (string)value;
            }
            return null;
        }

        static string MessageOf(int status, JsonObject body)
        {
            string field = TextOf(body, "field");
            return string.Format("{0} {1}: {2}{3}", status, TextOf(body, "error") ?? "gateway_error",
                TextOf(body, "detail") ?? "", field != null ? " (field " + field + ")" : "");
        }

        /// <summary>
        /// The typed exception of an answer: by its <c>error</c> code, else by its status.
        /// </summary>
        /// <param name="status">the HTTP status (0: no answer)</param>
        /// <param name="body">the decoded body, or null when it was not a JSON error body</param>
        /// <param name="text">the raw body, the detail when it was not JSON</param>
        /// <param name="retryAfter">the <c>Retry-After</c> header's value, or null</param>
        public static GatewayException Of(int status, JsonValue body, string text, string retryAfter)
        {
            JsonObject obj = body as JsonObject;
            if (obj == null || TextOf(obj, "error") == null)
            {
                obj = new JsonObject();
                obj["error"] = "http_" + status.ToString(CultureInfo.InvariantCulture);
                obj["detail"] = text == null ? "" : (text.Length > 500 ? text.Substring(0, 500) : text);
            }
            double? wait = null;
            double seconds;
            if (retryAfter != null && double.TryParse(retryAfter.Trim(), NumberStyles.Float, CultureInfo.InvariantCulture, out seconds))
            {
                wait = Math.Max(0, seconds);
            }
            switch (TextOf(obj, "error"))
            {
                case "bad_request": return new BadRequestException(status, obj, wait);
                case "invalid_request": return new InvalidRequestException(status, obj, wait);
                case "unauthorized": return new UnauthorizedException(status, obj, wait);
                case "pro_required": return new ProRequiredException(status, obj, wait);
                case "forbidden": return new ForbiddenException(status, obj, wait);
                case "not_found": return new NotFoundException(status, obj, wait);
                case "method_not_allowed": return new MethodNotAllowedException(status, obj, wait);
                case "duplicate_job": return new DuplicateJobException(status, obj, wait);
                case "lease_lost": return new LeaseLostException(status, obj, wait);
                case "body_too_large": return new BodyTooLargeException(status, obj, wait);
                case "not_json": return new NotJsonException(status, obj, wait);
                case "rate_limited": return new RateLimitedException(status, obj, wait);
                case "lock_timeout": return new LockTimeoutException(status, obj, wait);
                case "database_unavailable": return new DatabaseUnavailableException(status, obj, wait);
            }
            switch (status)
            {
                case 0: return new GatewayUnreachableException(status, obj, wait);
                case 400: return new BadRequestException(status, obj, wait);
                case 401: return new UnauthorizedException(status, obj, wait);
                case 402: return new ProRequiredException(status, obj, wait);
                case 403: return new ForbiddenException(status, obj, wait);
                case 404: return new NotFoundException(status, obj, wait);
                case 405: return new MethodNotAllowedException(status, obj, wait);
                case 413: return new BodyTooLargeException(status, obj, wait);
                case 415: return new NotJsonException(status, obj, wait);
                case 422: return new InvalidRequestException(status, obj, wait);
                case 429: return new RateLimitedException(status, obj, wait);
                case 502: case 503: case 504: return new ServiceUnavailableException(status, obj, wait);
                default: return new GatewayException(status, obj, wait);
            }
        }

        internal static GatewayUnreachableException Unreachable(string code, string detail)
        {
            var body = new JsonObject();
            body["error"] = code;
            body["detail"] = detail;
            return new GatewayUnreachableException(0, body, null);
        }
    }

    /// <summary>No answer: the connection failed (<c>connection_failed</c>) or timed out (<c>timeout</c>).</summary>
    public class GatewayUnreachableException : GatewayException
    {
        public GatewayUnreachableException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>400 <c>bad_request</c>: a path or query parameter is malformed; <c>Field</c> names it.</summary>
    public class BadRequestException : GatewayException
    {
        public BadRequestException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>422 <c>invalid_request</c>: a body field is invalid (<c>Field</c>, and <c>Index</c> in a batch).</summary>
    public class InvalidRequestException : GatewayException
    {
        public InvalidRequestException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>401 <c>unauthorized</c>: no token, or an unknown, revoked or expired one.</summary>
    public class UnauthorizedException : GatewayException
    {
        public UnauthorizedException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>402 <c>pro_required</c>: a Pro unique mode or route without a valid licence.</summary>
    public class ProRequiredException : GatewayException
    {
        public ProRequiredException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>403 <c>forbidden</c>: the token lacks the scope (<c>Scope</c>) or is not allowed the queue.</summary>
    public class ForbiddenException : GatewayException
    {
        public ForbiddenException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>404 <c>not_found</c>: no such job, a free id, or no such route.</summary>
    public class NotFoundException : GatewayException
    {
        public NotFoundException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>405 <c>method_not_allowed</c>: the route exists, not with this method.</summary>
    public class MethodNotAllowedException : GatewayException
    {
        public MethodNotAllowedException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>409 <c>duplicate_job</c>: the id is held; <c>Jid</c> is the holder's.</summary>
    public class DuplicateJobException : GatewayException
    {
        public DuplicateJobException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>409 <c>lease_lost</c>: a report on a job no longer held under that lease token.</summary>
    public class LeaseLostException : GatewayException
    {
        public LeaseLostException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>413 <c>body_too_large</c>: the body is over the gateway's <c>MAX_BODY_BYTES</c>.</summary>
    public class BodyTooLargeException : GatewayException
    {
        public BodyTooLargeException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>415 <c>not_json</c>: the body was not JSON.</summary>
    public class NotJsonException : GatewayException
    {
        public NotJsonException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>429 <c>rate_limited</c>: the token is over its rate; wait <c>RetryAfter</c> seconds.</summary>
    public class RateLimitedException : GatewayException
    {
        public RateLimitedException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>503: try again after <c>RetryAfter</c> seconds.</summary>
    public class ServiceUnavailableException : GatewayException
    {
        public ServiceUnavailableException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>503 <c>lock_timeout</c>: a creation lock timed out.</summary>
    public class LockTimeoutException : ServiceUnavailableException
    {
        public LockTimeoutException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }

    /// <summary>503 <c>database_unavailable</c>: the gateway's database did not answer.</summary>
    public class DatabaseUnavailableException : ServiceUnavailableException
    {
        public DatabaseUnavailableException(int status, JsonObject body, double? retryAfter) : base(status, body, retryAfter) { }
    }
}
