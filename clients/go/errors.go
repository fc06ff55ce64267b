package jobqueue

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// APIError is an error answer of the gateway (docs/gateway.md, "Errors"): its HTTP
// status and the body's members. Every call returns it wrapped in the typed error of its
// code (InvalidRequestError, LeaseLostError, ...), so callers test for what they mean
// with errors.As; errors.As(err, &apiErr) with apiErr *APIError reads the members of
// any of them.
type APIError struct {
	// Status is the HTTP status (0 when the gateway did not answer: UnreachableError).
	Status int
	// Code is the body's "error" code, such as "invalid_request".
	Code string
	// Detail is the body's sentence for people.
	Detail string
	// Field is the request field at fault ("priority", "jobs[3].queue"), or "".
	Field string
	// Index is the refused job's position in a batch, or -1.
	Index int
	// JID is the holder of a duplicate id (409 duplicate_job), or "".
	JID string
	// Reason is the package's own code of an invalid_request, or "".
	Reason string
	// Scope is the scope a 403 lacked, or "".
	Scope string
	// RetryAfter is the Retry-After header's wait (429, 503), or 0.
	RetryAfter time.Duration
	// Body is the whole decoded body (nil when it was not a JSON object).
	Body map[string]any
}

func (e *APIError) Error() string {
	where := ""
	if e.Field != "" {
		where = " (field " + e.Field + ")"
	}
	if e.Status == 0 {
		return fmt.Sprintf("jobqueue: gateway unreachable: %s", e.Detail)
	}
	return fmt.Sprintf("jobqueue: %d %s: %s%s", e.Status, e.Code, e.Detail, where)
}

// API returns the error's members (every typed error has them).
func (e *APIError) API() *APIError { return e }

// The typed errors, one per code. Each embeds *APIError (its members and Error()).
type (
	// UnreachableError: no answer (connection refused, timeout, a body that is not the
	// gateway's).
	UnreachableError struct{ *APIError }
	// BadRequestError: 400 bad_request, a malformed path or query parameter.
	BadRequestError struct{ *APIError }
	// InvalidRequestError: 422 invalid_request, a body field is invalid (Field names it).
	InvalidRequestError struct{ *APIError }
	// UnauthorizedError: 401, no token or an unknown, revoked or expired one.
	UnauthorizedError struct{ *APIError }
	// ProRequiredError: 402, a Pro option or route without a valid licence.
	ProRequiredError struct{ *APIError }
	// ForbiddenError: 403, the token lacks the scope (Scope) or the queue.
	ForbiddenError struct{ *APIError }
	// NotFoundError: 404, no such job, worker or route.
	NotFoundError struct{ *APIError }
	// MethodNotAllowedError: 405.
	MethodNotAllowedError struct{ *APIError }
	// DuplicateJobError: 409 duplicate_job, the id is held (JID is the holder).
	DuplicateJobError struct{ *APIError }
	// LeaseLostError: 409 lease_lost, the job is no longer held under that lease token:
	// drop the outcome.
	LeaseLostError struct{ *APIError }
	// BodyTooLargeError: 413, the body is over the gateway's MAX_BODY_BYTES.
	BodyTooLargeError struct{ *APIError }
	// NotJSONError: 415 not_json, the body was not sent as JSON.
	NotJSONError struct{ *APIError }
	// RateLimitedError: 429, the token is over RATE_PER_MINUTE (RetryAfter).
	RateLimitedError struct{ *APIError }
	// ServiceUnavailableError: 503 of another code (RetryAfter).
	ServiceUnavailableError struct{ *APIError }
	// LockTimeoutError: 503 lock_timeout, a creation lock timed out (RetryAfter).
	LockTimeoutError struct{ *APIError }
	// DatabaseUnavailableError: 503 database_unavailable (RetryAfter).
	DatabaseUnavailableError struct{ *APIError }
	// OtherError: an answer of a status and code this client does not know.
	OtherError struct{ *APIError }
)

// apiError is what every typed error offers.
type apiError interface {
	error
	API() *APIError
}

// AsAPIError returns the members of err if it is (or wraps) a gateway error.
func AsAPIError(err error) (*APIError, bool) {
	for err != nil {
		if e, ok := err.(apiError); ok {
			return e.API(), true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return nil, false
		}
		err = u.Unwrap()
	}
	return nil, false
}

// Retryable reports whether err is worth trying again after a wait: no answer, 429 or 503.
func Retryable(err error) bool {
	e, ok := AsAPIError(err)
	return ok && (e.Status == 0 || e.Status == 429 || e.Status == 503)
}

// Class is the canonical name of err's type (clients/conformance/README.md, "Errors":
// "DuplicateJob", "NotJson"), or "" when err is not a gateway error.
func Class(err error) string {
	switch err.(type) {
	case *UnreachableError:
		return "GatewayUnreachable"
	case *BadRequestError:
		return "BadRequest"
	case *InvalidRequestError:
		return "InvalidRequest"
	case *UnauthorizedError:
		return "Unauthorized"
	case *ProRequiredError:
		return "ProRequired"
	case *ForbiddenError:
		return "Forbidden"
	case *NotFoundError:
		return "NotFound"
	case *MethodNotAllowedError:
		return "MethodNotAllowed"
	case *DuplicateJobError:
		return "DuplicateJob"
	case *LeaseLostError:
		return "LeaseLost"
	case *BodyTooLargeError:
		return "BodyTooLarge"
	case *NotJSONError:
		return "NotJson"
	case *RateLimitedError:
		return "RateLimited"
	case *LockTimeoutError:
		return "LockTimeout"
	case *DatabaseUnavailableError:
		return "DatabaseUnavailable"
	case *ServiceUnavailableError:
		return "ServiceUnavailable"
	case *OtherError:
		return "GatewayError"
	}
	return ""
}

// errorOf builds the typed error of an answer's status and body.
func errorOf(status int, body []byte, retryAfter string) error {
	e := &APIError{Status: status, Index: -1}
	var members map[string]any
	if json.Unmarshal(body, &members) == nil && members != nil {
		e.Body = members
		e.Code = str(members["error"])
		e.Detail = str(members["detail"])
		e.Field = str(members["field"])
		e.JID = str(members["jid"])
		e.Reason = str(members["reason"])
		e.Scope = str(members["scope"])
		if index, ok := members["index"].(float64); ok {
			e.Index = int(index)
		}
	}
	if e.Detail == "" {
		e.Detail = strings.TrimSpace(string(body))
		if len(e.Detail) > 200 {
			e.Detail = e.Detail[:200]
		}
	}
	if seconds, err := strconv.ParseFloat(strings.TrimSpace(retryAfter), 64); err == nil && seconds >= 0 {
		e.RetryAfter = time.Duration(seconds * float64(time.Second))
	}
	switch {
	case e.Code == "duplicate_job":
		return &DuplicateJobError{e}
	case e.Code == "lease_lost":
		return &LeaseLostError{e}
	case e.Code == "lock_timeout":
		return &LockTimeoutError{e}
	case e.Code == "database_unavailable":
		return &DatabaseUnavailableError{e}
	}
	switch status {
	case 400:
		return &BadRequestError{e}
	case 401:
		return &UnauthorizedError{e}
	case 402:
		return &ProRequiredError{e}
	case 403:
		return &ForbiddenError{e}
	case 404:
		return &NotFoundError{e}
	case 405:
		return &MethodNotAllowedError{e}
	case 413:
		return &BodyTooLargeError{e}
	case 415:
		return &NotJSONError{e}
	case 422:
		return &InvalidRequestError{e}
	case 429:
		return &RateLimitedError{e}
	case 503:
		return &ServiceUnavailableError{e}
	}
	return &OtherError{e}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
