package jobqueue

import "encoding/json"

// Int returns a pointer to v, for the optional numbers of EnqueueOptions.
func Int(v int) *int { return &v }

// Int64 returns a pointer to v, for the optional numbers of EnqueueOptions.
func Int64(v int64) *int64 { return &v }

// EnqueueOptions are a job's options, exactly enqueue_job's (docs/gateway.md, "JobIn").
// The zero value of each (nil, "") is "not given": the gateway's default applies; Int
// and Int64 make the pointers.
type EnqueueOptions struct {
	// Queue: "" is the job type's queue, else the default queue.
	Queue string `json:"queue,omitempty"`
	// Priority: 1 runs first; nil is the job type's (Int(3) gives one).
	Priority *int `json:"priority,omitempty"`
	// Delay: "500ms", "5s", "1m", or a number of seconds (float64 or int).
	Delay any `json:"delay,omitempty"`
	// RunAt: ISO 8601 with an offset ("2030-01-02T03:04:05+00:00"); not with Delay.
	RunAt string `json:"run_at,omitempty"`
	// ExpiresMs: dead-letter the job if not claimed within this many ms.
	ExpiresMs *int64 `json:"expires_ms,omitempty"`
	// TimeoutMs: the longest one attempt may run, ms.
	TimeoutMs *int64 `json:"timeout_ms,omitempty"`
	// MaxRetry: retries after the first attempt; nil is the job type's.
	MaxRetry *int `json:"max_retry,omitempty"`
	// UniqueKey: a second enqueue with it is deduplicated while the first holds it.
	UniqueKey string `json:"unique_key,omitempty"`
	// UniqueMode: "while_locked", or (Pro) "until_executing", "until_executed".
	UniqueMode string `json:"unique_mode,omitempty"`
	// UniqueTTLMs: how long the unique key is held at most, ms; nil: the default.
	UniqueTTLMs *int64 `json:"unique_ttl_ms,omitempty"`
	// ID: the job holds this id (docs/design.md#ids); a held id is DuplicateJobError.
	ID string `json:"id,omitempty"`
	// LimitKey: the key a partitioned limit counts the job under (docs/limits.md).
	LimitKey string `json:"limit_key,omitempty"`
	// Batch: an open batch's id the job joins (docs/workflows.md); Enqueue only, not
	// EnqueueBatch.
	Batch *int64 `json:"batch,omitempty"`
	// After: the jids the job waits for (docs/workflows.md); it is "blocked" until
	// each is done. Enqueue only.
	After []string `json:"after,omitempty"`
	// OnUpstreamFailure: what an upstream job's death does to it: "cancel" (the
	// gateway's default), "skip" or "ignore"; only with After.
	OnUpstreamFailure string `json:"on_upstream_failure,omitempty"`
}

// JobSpec is one job of a batch: its type, payload and options.
type JobSpec struct {
	JobType string
	Payload any
	Options EnqueueOptions
}

// Enqueued is the answer to one enqueued job: Status "enqueued" with the new jid, or
// "deduplicated" with the jid of the job holding the unique key.
type Enqueued struct {
	Status string `json:"status"`
	JID    string `json:"jid"`
}

// ErrorEntry is a failed attempt of a job.
type ErrorEntry struct {
	Attempt        *int    `json:"attempt"`
	Message        string  `json:"message"`
	ExceptionClass string  `json:"exception_class"`
	At             *string `json:"at"`
}

// Job is a job by jid (GET /jobs/{jid}). Status is the stored status, State the state
// word (scheduled, waiting, running, failed, done, cancelled, blocked); Payload and Result are
// JSON null for a secure job type. Times are ISO 8601 strings, nil when unset.
type Job struct {
	JID             string          `json:"jid"`
	Queue           string          `json:"queue"`
	JobType         string          `json:"job_type"`
	ID              *string         `json:"id"`
	Status          string          `json:"status"`
	State           string          `json:"state"`
	Attempt         int             `json:"attempt"`
	MaxRetry        int             `json:"max_retry"`
	Priority        int             `json:"priority"`
	Secure          bool            `json:"secure"`
	Payload         json.RawMessage `json:"payload"`
	Result          json.RawMessage `json:"result"`
	LastError       *ErrorEntry     `json:"last_error"`
	CancelRequested bool            `json:"cancel_requested"`
	RunAt           *string         `json:"run_at"`
	CreatedAt       *string         `json:"created_at"`
	StartedAt       *string         `json:"started_at"`
	FinishedAt      *string         `json:"finished_at"`
	ExpiresAt       *string         `json:"expires_at"`
}

// CancelResult: Cancelled, a waiting job was stopped; CancelRequested, a running job
// was asked to stop.
type CancelResult struct {
	Cancelled       bool `json:"cancelled"`
	CancelRequested bool `json:"cancel_requested"`
}

// IDValue is what the id verbs add, set or update: a value, the job type (default: the
// queue's one job type), and when it runs (At, ISO 8601, or Delay).
type IDValue struct {
	Value   any    `json:"value"`
	JobType string `json:"job_type,omitempty"`
	At      string `json:"at,omitempty"`
	Delay   any    `json:"delay,omitempty"`
}

// IDJob is a job as the id verbs show it.
type IDJob struct {
	ID              *string         `json:"id"`
	Value           json.RawMessage `json:"value"`
	State           string          `json:"state"`
	At              *string         `json:"at"`
	Attempt         int             `json:"attempt"`
	JID             string          `json:"jid"`
	Queue           string          `json:"queue"`
	JobType         string          `json:"job_type"`
	Priority        int             `json:"priority"`
	MaxRetry        int             `json:"max_retry"`
	Result          json.RawMessage `json:"result"`
	Message         string          `json:"message"`
	CancelRequested bool            `json:"cancel_requested"`
	CreatedAt       *string         `json:"created_at"`
	StartedAt       *string         `json:"started_at"`
	FinishedAt      *string         `json:"finished_at"`
}

// ListOptions filter the id verb list: by id prefix and state word, a page of at most
// Limit, from Cursor (a previous Page's Next).
type ListOptions struct {
	Prefix string
	State  string
	Limit  int
	Cursor string
}

// Page is a page of IDJob; pass Next as ListOptions.Cursor for the following one
// (nil: the last page).
type Page struct {
	Jobs []IDJob `json:"jobs"`
	Next *string `json:"next"`
}

// RegisterOptions describe a worker to the console (POST /worker/register).
type RegisterOptions struct {
	// Name: "" lets the gateway make one (use Registration.Name afterwards).
	Name        string   `json:"name,omitempty"`
	Queues      []string `json:"queues"`
	Host        string   `json:"host,omitempty"`
	PID         int      `json:"pid,omitempty"`
	Languages   []string `json:"languages,omitempty"`
	JobTypes    []string `json:"job_types,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	Version     string   `json:"version,omitempty"`
}

// Registration is the register's answer: the worker's name, and the lease, heartbeat
// interval and longest claim wait to use, ms.
type Registration struct {
	Name        string `json:"name"`
	LeaseMs     int64  `json:"lease_ms"`
	HeartbeatMs int64  `json:"heartbeat_ms"`
	MaxWaitMs   int64  `json:"max_wait_ms"`
}

// ClaimOptions: the queues to claim from, the job types this worker runs (empty: any
// external job type), up to Limit jobs (1..100, sent as given), waiting up to WaitMs for one,
// for the registered Worker name, under a lease of LeaseMs (0: the gateway's).
type ClaimOptions struct {
	Queues   []string `json:"queues"`
	JobTypes []string `json:"job_types,omitempty"`
	Limit    int      `json:"limit"`
	WaitMs   int64    `json:"wait_ms"`
	Worker   string   `json:"worker,omitempty"`
	LeaseMs  int64    `json:"lease_ms,omitempty"`
}

// ClaimedJob is a claimed job: report on it with its LeaseToken.
type ClaimedJob struct {
	JID        string          `json:"jid"`
	Queue      string          `json:"queue"`
	JobType    string          `json:"job_type"`
	ID         *string         `json:"id"`
	Payload    json.RawMessage `json:"payload"`
	Attempt    int             `json:"attempt"`
	MaxRetry   int             `json:"max_retry"`
	Priority   int             `json:"priority"`
	TimeoutMs  int64           `json:"timeout_ms"`
	LeaseToken string          `json:"lease_token"`
}

// FailOptions: the failure's message and error class (stored as the attempt's
// exception_class), whether to retry (false: dead letter at once), and whether the
// job stopped because it was asked to (Cancelled).
type FailOptions struct {
	Error          string
	ExceptionClass string
	NoRetry        bool
	Cancelled      bool
}
