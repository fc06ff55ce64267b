// Package jobqueue is a Go client of django-jobqueue's HTTP gateway (docs/gateway.md):
// the producer calls (enqueue, batches, the id verbs, get, cancel, retry), the worker
// protocol's calls (register, claim, heartbeat, complete, fail, stop), and a Worker that
// runs handlers in a pool of goroutines. Standard library only.
//
// Every call takes a context.Context and returns the gateway's answer or the typed
// error of its refusal (InvalidRequestError, LeaseLostError, ...; see errors.go).
package jobqueue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Version is the client's version, sent at registration.
const Version = "0.1.0"

// maxAnswerBytes bounds an answer's body (a page of 1,000 jobs fits many times over).
const maxAnswerBytes = 64 << 20

// Client is a client of the gateway, safe for concurrent use.
type Client struct {
	baseURL string
	token   string
	// HTTP is the http.Client used (default: one with no overall timeout: each call's
	// context bounds it, and a claim's wait_ms is added to Timeout).
	HTTP *http.Client
	// Timeout bounds one request beyond a claim's own wait (default 30 s).
	Timeout time.Duration
}

// NewClient returns a client of the gateway at baseURL, the site's root
// ("http://127.0.0.1:8000") or the gateway's ("http://127.0.0.1:8000/sdk"), with a bearer
// token ("jqt_...", from manage.py jobqueue token create).
func NewClient(baseURL, token string) *Client {
	root := strings.TrimRight(baseURL, "/")
	if !strings.HasSuffix(root, "/sdk") {
		root += "/sdk"
	}
	return &Client{baseURL: root, token: token, HTTP: &http.Client{}, Timeout: 30 * time.Second}
}

// BaseURL returns the gateway's root, ending in /sdk.
func (c *Client) BaseURL() string { return c.baseURL }

// segment escapes one path segment: RFC 3986's unreserved characters stay.
func segment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), "+", "%2B")
}

// idPath escapes an id, which may contain "/" (kept: the id is the rest of the path).
func idPath(id string) string {
	parts := strings.Split(id, "/")
	for i, part := range parts {
		parts[i] = segment(part)
	}
	return strings.Join(parts, "/")
}

// do sends one request and decodes a 2xx answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, body any, out any, extra time.Duration) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("jobqueue: cannot encode the request body: %w", err)
		}
		reader = bytes.NewReader(data)
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout+extra)
		defer cancel()
	}
	request, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, reader)
	if err != nil {
		return fmt.Errorf("jobqueue: %w", err)
	}
	request.Header.Set("Authorization", "Bearer "+c.token)
	request.Header.Set("Accept", "application/json")
	request.Header.Set("User-Agent", "django-jobqueue-go/"+Version)
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	response, err := client.Do(request)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err
		}
		return &UnreachableError{&APIError{Code: "unreachable", Detail: err.Error(), Index: -1}}
	}
	defer response.Body.Close()
	data, err := io.ReadAll(io.LimitReader(response.Body, maxAnswerBytes))
	if err != nil {
		return &UnreachableError{&APIError{Code: "unreachable", Detail: err.Error(), Index: -1}}
	}
	if response.StatusCode < 200 || response.StatusCode > 299 {
		return errorOf(response.StatusCode, data, response.Header.Get("Retry-After"))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &UnreachableError{&APIError{
			Status: response.StatusCode, Code: "unreachable", Index: -1,
			Detail: "the answer is not the gateway's JSON: " + err.Error(),
		}}
	}
	return nil
}

// jobBody is a JobIn: the options with the job type and payload.
func jobBody(jobType string, payload any, options EnqueueOptions) (map[string]any, error) {
	data, err := json.Marshal(options)
	if err != nil {
		return nil, fmt.Errorf("jobqueue: cannot encode the options: %w", err)
	}
	body := map[string]any{}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, fmt.Errorf("jobqueue: cannot encode the options: %w", err)
	}
	body["job_type"] = jobType
	body["payload"] = payload
	return body, nil
}

// Producer calls ---------------------------------------------------------------------

// Enqueue enqueues one job (POST /jobs). payload is any JSON-encodable value (a
// json.RawMessage is sent as is). Errors: InvalidRequestError (Field names the option),
// ProRequiredError, DuplicateJobError (a held ID; JID is the holder), ForbiddenError.
func (c *Client) Enqueue(ctx context.Context, jobType string, payload any, options EnqueueOptions) (Enqueued, error) {
	var out Enqueued
	body, err := jobBody(jobType, payload, options)
	if err == nil {
		err = c.do(ctx, http.MethodPost, "/jobs", body, &out, 0)
	}
	return out, err
}

// EnqueueBatch enqueues up to the gateway's MAX_BATCH jobs, all or nothing: one refused
// job refuses the batch (the error's Index names it) and nothing is stored.
func (c *Client) EnqueueBatch(ctx context.Context, jobs []JobSpec) ([]Enqueued, error) {
	items := make([]map[string]any, 0, len(jobs))
	for _, job := range jobs {
		body, err := jobBody(job.JobType, job.Payload, job.Options)
		if err != nil {
			return nil, err
		}
		items = append(items, body)
	}
	var out struct {
		Results []Enqueued `json:"results"`
	}
	err := c.do(ctx, http.MethodPost, "/jobs/batch", map[string]any{"jobs": items}, &out, 0)
	return out.Results, err
}

// GetJob returns a job by jid. Errors: NotFoundError, ForbiddenError.
func (c *Client) GetJob(ctx context.Context, jid string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodGet, "/jobs/"+segment(jid), nil, &out, 0)
	return out, err
}

// Cancel cancels a waiting job, or asks a running one to stop. Errors: NotFoundError.
func (c *Client) Cancel(ctx context.Context, jid string) (CancelResult, error) {
	var out CancelResult
	err := c.do(ctx, http.MethodPost, "/jobs/"+segment(jid)+"/cancel", nil, &out, 0)
	return out, err
}

// Retry makes a dead letter (or a scheduled job) due now; false when it was neither
// (admin scope). Errors: NotFoundError, ForbiddenError.
func (c *Client) Retry(ctx context.Context, jid string) (bool, error) {
	var out struct {
		Retried bool `json:"retried"`
	}
	err := c.do(ctx, http.MethodPost, "/jobs/"+segment(jid)+"/retry", nil, &out, 0)
	return out.Retried, err
}

// The id verbs ------------------------------------------------------------------------

func (c *Client) idVerb(ctx context.Context, verb, queue, id string, value IDValue) (bool, error) {
	var out map[string]any
	path := "/queues/" + segment(queue) + "/ids/" + idPath(id) + "/" + verb
	if err := c.do(ctx, http.MethodPost, path, value, &out, 0); err != nil {
		return false, err
	}
	answer, _ := out[map[string]string{"add": "added", "set": "set", "update": "updated"}[verb]].(bool)
	return answer, nil
}

// Add enqueues a job holding id on queue unless a job holds it already (then false).
func (c *Client) Add(ctx context.Context, queue, id string, value IDValue) (bool, error) {
	return c.idVerb(ctx, "add", queue, id, value)
}

// Set adds, or replaces the waiting job's value and time; true.
func (c *Client) Set(ctx context.Context, queue, id string, value IDValue) (bool, error) {
	return c.idVerb(ctx, "set", queue, id, value)
}

// Update changes a scheduled or waiting job holding id; false when there is none.
func (c *Client) Update(ctx context.Context, queue, id string, value IDValue) (bool, error) {
	return c.idVerb(ctx, "update", queue, id, value)
}

// CancelID removes the waiting job holding id, or asks a running one to stop; false when
// the id is free.
func (c *Client) CancelID(ctx context.Context, queue, id string) (bool, error) {
	var out struct {
		Cancelled bool `json:"cancelled"`
	}
	path := "/queues/" + segment(queue) + "/ids/" + idPath(id) + "/cancel"
	err := c.do(ctx, http.MethodPost, path, nil, &out, 0)
	return out.Cancelled, err
}

// GetID returns the job holding id on queue, or nil when the id is free.
func (c *Client) GetID(ctx context.Context, queue, id string) (*IDJob, error) {
	var out IDJob
	err := c.do(ctx, http.MethodGet, "/queues/"+segment(queue)+"/ids/"+idPath(id), nil, &out, 0)
	var notFound *NotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns a page of queue's jobs by id prefix and state (ListOptions).
func (c *Client) List(ctx context.Context, queue string, options ListOptions) (Page, error) {
	query := url.Values{}
	if options.Prefix != "" {
		query.Set("prefix", options.Prefix)
	}
	if options.State != "" {
		query.Set("state", options.State)
	}
	if options.Limit != 0 {
		query.Set("limit", strconv.Itoa(options.Limit))
	}
	if options.Cursor != "" {
		query.Set("cursor", options.Cursor)
	}
	path := "/queues/" + segment(queue) + "/jobs"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	var out Page
	err := c.do(ctx, http.MethodGet, path, nil, &out, 0)
	if out.Jobs == nil {
		out.Jobs = []IDJob{}
	}
	return out, err
}

// The worker protocol ------------------------------------------------------------------

// Register stores a worker row (the console lists it) and returns the lease and
// heartbeat interval to use. Errors: ForbiddenError (the name is another token's).
func (c *Client) Register(ctx context.Context, options RegisterOptions) (Registration, error) {
	var out Registration
	err := c.do(ctx, http.MethodPost, "/worker/register", options, &out, 0)
	return out, err
}

// Claim claims up to options.Limit due jobs, waiting up to options.WaitMs for one
// (long poll); no job due in that time is an empty slice.
func (c *Client) Claim(ctx context.Context, options ClaimOptions) ([]ClaimedJob, error) {
	var out struct {
		Jobs []ClaimedJob `json:"jobs"`
	}
	wait := time.Duration(options.WaitMs) * time.Millisecond
	err := c.do(ctx, http.MethodPost, "/worker/claim", options, &out, wait)
	if out.Jobs == nil {
		out.Jobs = []ClaimedJob{}
	}
	return out.Jobs, err
}

// Heartbeat extends a claimed job's lease (leaseMs 0: the gateway's) and reports whether
// the job was asked to stop. Errors: LeaseLostError (no longer held under leaseToken).
func (c *Client) Heartbeat(ctx context.Context, jid, leaseToken string, leaseMs int64) (bool, error) {
	body := map[string]any{"lease_token": leaseToken}
	if leaseMs > 0 {
		body["lease_ms"] = leaseMs
	}
	var out struct {
		CancelRequested bool `json:"cancel_requested"`
	}
	err := c.do(ctx, http.MethodPost, "/worker/jobs/"+segment(jid)+"/heartbeat", body, &out, 0)
	return out.CancelRequested, err
}

// Complete reports success with a JSON result and returns the stored status ("done", or
// "init" when an id's set asked for one run more). Errors: LeaseLostError.
func (c *Client) Complete(ctx context.Context, jid, leaseToken string, result any) (string, error) {
	var out struct {
		Status string `json:"status"`
	}
	body := map[string]any{"lease_token": leaseToken, "result": result}
	err := c.do(ctx, http.MethodPost, "/worker/jobs/"+segment(jid)+"/complete", body, &out, 0)
	return out.Status, err
}

// Fail reports a failed attempt and returns the stored status ("retry", "max_retry",
// "error", "cancelled"). Errors: LeaseLostError.
func (c *Client) Fail(ctx context.Context, jid, leaseToken string, options FailOptions) (string, error) {
	body := map[string]any{
		"lease_token": leaseToken,
		"error":       options.Error,
		"retry":       !options.NoRetry,
		"cancelled":   options.Cancelled,
	}
	if options.ExceptionClass != "" {
		body["exception_class"] = options.ExceptionClass
	}
	var out struct {
		Status string `json:"status"`
	}
	err := c.do(ctx, http.MethodPost, "/worker/jobs/"+segment(jid)+"/fail", body, &out, 0)
	return out.Status, err
}

// StopWorker marks the registered worker name stopped (a clean exit); false when it
// already was. Errors: NotFoundError (no gateway worker has that name), ForbiddenError.
func (c *Client) StopWorker(ctx context.Context, name string) (bool, error) {
	var out struct {
		Stopped bool `json:"stopped"`
	}
	err := c.do(ctx, http.MethodPost, "/worker/stop", map[string]any{"name": name}, &out, 0)
	return out.Stopped, err
}
