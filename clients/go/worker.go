package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Handler runs one job and returns its JSON-encodable result, or an error: the attempt
// fails and is retried with backoff (wrap it with Permanent to dead-letter it at once).
// ctx is cancelled when the job is asked to stop (job.CancelRequested()), when its lease
// is lost (job.LeaseLost()), or after the job's timeout_ms; a worker's stop does not
// cancel it: running jobs finish and are reported.
type Handler func(ctx context.Context, job *JobContext) (any, error)

// JobContext is what a handler knows of its job.
type JobContext struct {
	ClaimedJob
	// Client is the worker's client, for an enqueue from inside the handler.
	Client *Client
	// Worker is the registered worker name.
	Worker string

	cancelRequested atomic.Bool
	leaseLost       atomic.Bool
}

// Decode decodes the job's JSON payload into v.
func (j *JobContext) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

// CancelRequested reports whether a heartbeat answered cancel_requested: stop, and
// return ctx.Err() (the job is reported cancelled).
func (j *JobContext) CancelRequested() bool { return j.cancelRequested.Load() }

// LeaseLost reports whether a heartbeat answered 409: the outcome will be dropped.
func (j *JobContext) LeaseLost() bool { return j.leaseLost.Load() }

// permanentError marks a failure that is not retried.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent wraps err so the attempt is dead-lettered at once (fail with retry false).
func Permanent(err error) error { return &permanentError{err} }

// ErrorClass is implemented by errors that name their class for the stored attempt's
// exception_class (default: the error's Go type, such as "*fs.PathError").
type ErrorClass interface{ ErrorClass() string }

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// Queues to claim from (required).
	Queues []string
	// Concurrency: jobs run at once, each on its own goroutine (default 1).
	Concurrency int
	// Name: the registered name (default "go-<host>-<pid>").
	Name string
	// WaitMs: the longest wait of one claim, ms (default 5000; capped by the gateway's
	// max_wait_ms). It is also the longest a stop waits for a claim in flight.
	WaitMs int64
	// LeaseMs: the lease asked for at claim and heartbeat (0: the gateway's LEASE_MS).
	LeaseMs int64
	// Logger: where the worker logs (default: log.Default()).
	Logger *log.Logger
}

// Stats are a worker's outcomes: jobs completed, failed (reported fail), cancelled
// (reported cancelled), lost (409 lease_lost: dropped), and unreported (the gateway
// did not answer the report).
type Stats struct {
	Completed, Failed, Cancelled, Lost, Unreported int64
}

func (s Stats) String() string {
	return fmt.Sprintf("completed=%d failed=%d cancelled=%d lost=%d unreported=%d",
		s.Completed, s.Failed, s.Cancelled, s.Lost, s.Unreported)
}

// Worker runs handlers for jobs claimed from the gateway (docs/gateway.md, "The worker
// protocol"): register, claim as many jobs as it has free goroutines, heartbeat each,
// report complete or fail, and on stop finish and report the running jobs, then stop
// its name.
type Worker struct {
	client   *Client
	handlers map[string]Handler
	options  WorkerOptions
	logger   *log.Logger
	name     string

	completed, failed, cancelled, lost, unreported atomic.Int64
}

// NewWorker returns a worker of client running handlers (job type to Handler).
func NewWorker(client *Client, handlers map[string]Handler, options WorkerOptions) (*Worker, error) {
	if len(handlers) == 0 {
		return nil, errors.New("jobqueue: a Worker needs at least one handler")
	}
	if len(options.Queues) == 0 {
		return nil, errors.New("jobqueue: a Worker needs at least one queue")
	}
	if options.Concurrency == 0 {
		options.Concurrency = 1
	}
	if options.Concurrency < 1 || options.Concurrency > 100 {
		return nil, fmt.Errorf("jobqueue: Concurrency must be 1..100, got %d", options.Concurrency)
	}
	if options.WaitMs <= 0 {
		options.WaitMs = 5000
	}
	logger := options.Logger
	if logger == nil {
		logger = log.Default()
	}
	name := options.Name
	if name == "" {
		host, _ := os.Hostname()
		name = fmt.Sprintf("go-%s-%d", host, os.Getpid())
	}
	copied := make(map[string]Handler, len(handlers))
	for jobType, handler := range handlers {
		copied[jobType] = handler
	}
	return &Worker{client: client, handlers: copied, options: options, logger: logger, name: name}, nil
}

// Name returns the registered name (the gateway's, once Run registered).
func (w *Worker) Name() string { return w.name }

// Stats returns the outcomes so far.
func (w *Worker) Stats() Stats {
	return Stats{
		Completed: w.completed.Load(), Failed: w.failed.Load(), Cancelled: w.cancelled.Load(),
		Lost: w.lost.Load(), Unreported: w.unreported.Load(),
	}
}

// RunUntilSignal runs the worker until SIGTERM or SIGINT (or ctx ends): it then stops
// claiming, finishes and reports the running jobs, stops its name and returns.
func (w *Worker) RunUntilSignal(ctx context.Context) (Stats, error) {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	return w.Run(ctx)
}

// Run registers and runs the worker until ctx ends: then no more claims; the running
// jobs finish and are reported, the name is stopped, and Run returns the stats. It
// returns an error when the gateway refuses the worker (401, 403, an unknown job type).
func (w *Worker) Run(ctx context.Context) (Stats, error) {
	registration, err := w.register(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return w.Stats(), nil
		}
		return w.Stats(), err
	}
	w.name = registration.Name
	heartbeat := time.Duration(registration.HeartbeatMs) * time.Millisecond
	if heartbeat < 100*time.Millisecond {
		heartbeat = 100 * time.Millisecond
	}
	waitMs := w.options.WaitMs
	if registration.MaxWaitMs > 0 && waitMs > registration.MaxWaitMs {
		waitMs = registration.MaxWaitMs
	}
	w.logger.Printf("jobqueue: worker %s registered on %s (concurrency %d)",
		w.name, strings.Join(w.options.Queues, ","), w.options.Concurrency)

	slots := make(chan struct{}, w.options.Concurrency)
	var running sync.WaitGroup
	var failure error
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		// One free slot at least, then every other free one: the claim's limit.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		free := 1
	more:
		for free < w.options.Concurrency {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		// Not ctx: a claim in flight when the stop comes is answered, and its jobs run.
		jobs, err := w.client.Claim(context.Background(), ClaimOptions{
			Queues: w.options.Queues, JobTypes: w.jobTypes(), Limit: free, WaitMs: waitMs,
			Worker: w.name, LeaseMs: w.options.LeaseMs,
		})
		for i := len(jobs); i < free; i++ {
			<-slots
		}
		if err != nil {
			if !Retryable(err) {
				failure = err
				break
			}
			backoff = nextBackoff(backoff)
			w.logger.Printf("jobqueue: worker %s: claim failed, again in %s: %v", w.name, backoff, err)
			sleep(ctx, backoff)
			continue
		}
		backoff = 0
		for _, job := range jobs {
			running.Add(1)
			go func(job ClaimedJob) {
				defer func() {
					<-slots
					running.Done()
				}()
				w.execute(job, heartbeat)
			}(job)
		}
	}
	if failure == nil {
		w.logger.Printf("jobqueue: worker %s stopping: %d job(s) running", w.name, len(slots))
	}
	running.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.client.StopWorker(stopCtx, w.name); err != nil {
		w.logger.Printf("jobqueue: worker %s: stop not recorded: %v", w.name, err)
	}
	w.logger.Printf("jobqueue: worker %s stopped: %s", w.name, w.Stats())
	return w.Stats(), failure
}

func (w *Worker) jobTypes() []string {
	types := make([]string, 0, len(w.handlers))
	for jobType := range w.handlers {
		types = append(types, jobType)
	}
	return types
}

// register registers the worker, trying again while the gateway is unreachable, 429 or 503.
func (w *Worker) register(ctx context.Context) (Registration, error) {
	host, _ := os.Hostname()
	backoff := time.Duration(0)
	for {
		registration, err := w.client.Register(ctx, RegisterOptions{
			Name: w.name, Queues: w.options.Queues, Host: host, PID: os.Getpid(),
			Languages: []string{"go"}, JobTypes: w.jobTypes(),
			Concurrency: w.options.Concurrency, Version: Version,
		})
		if err == nil || !Retryable(err) || ctx.Err() != nil {
			return registration, err
		}
		backoff = nextBackoff(backoff)
		w.logger.Printf("jobqueue: worker %s: register failed, again in %s: %v", w.name, backoff, err)
		sleep(ctx, backoff)
	}
}

// execute runs one claimed job with its heartbeats, then reports its outcome.
func (w *Worker) execute(claimed ClaimedJob, interval time.Duration) {
	job := &JobContext{ClaimedJob: claimed, Client: w.client, Worker: w.name}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if claimed.TimeoutMs > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, time.Duration(claimed.TimeoutMs)*time.Millisecond)
		defer cancelTimeout()
	}
	done := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		w.heartbeats(job, interval, cancel, done)
	}()
	result, err := w.call(ctx, job)
	close(done)
	<-beating
	w.report(job, result, err)
}

// call runs the job's handler, a panic turned into an error.
func (w *Worker) call(ctx context.Context, job *JobContext) (result any, err error) {
	handler, ok := w.handlers[job.JobType]
	if !ok {
		return nil, Permanent(fmt.Errorf("no handler for job type %q", job.JobType))
	}
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return handler(ctx, job)
}

type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string      { return fmt.Sprintf("panic: %v\n%s", p.value, p.stack) }
func (p *panicError) ErrorClass() string { return "panic" }

// heartbeats extends the lease every interval until done; a cancel request or a lost
// lease cancels the handler's context.
func (w *Worker) heartbeats(job *JobContext, interval time.Duration, cancel context.CancelFunc, done <-chan struct{}) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ticker.C:
		}
		ctx, stop := context.WithTimeout(context.Background(), interval*4+5*time.Second)
		asked, err := w.client.Heartbeat(ctx, job.JID, job.LeaseToken, w.options.LeaseMs)
		stop()
		var lost *LeaseLostError
		switch {
		case errors.As(err, &lost):
			job.leaseLost.Store(true)
			w.logger.Printf("jobqueue: job %s: lease lost; its outcome will be dropped", job.JID)
			cancel()
			return
		case err != nil:
			w.logger.Printf("jobqueue: job %s: heartbeat failed: %v", job.JID, err)
		case asked && !job.cancelRequested.Load():
			job.cancelRequested.Store(true)
			cancel()
		}
	}
}

// report sends the outcome, trying again while the gateway is unreachable, 429 or 503.
func (w *Worker) report(job *JobContext, result any, failure error) {
	if job.LeaseLost() {
		w.lost.Add(1)
		return
	}
	var options FailOptions
	counter := &w.completed
	if failure != nil {
		options = FailOptions{Error: failure.Error(), ExceptionClass: errorClass(failure)}
		var permanent *permanentError
		switch {
		case job.CancelRequested() && errors.Is(failure, context.Canceled):
			options = FailOptions{Error: "cancelled on request", Cancelled: true, NoRetry: true}
			counter = &w.cancelled
		case errors.As(failure, &permanent):
			options.NoRetry = true
			counter = &w.failed
		default:
			counter = &w.failed
		}
	}
	backoff := time.Duration(0)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		if failure == nil {
			_, err = w.client.Complete(ctx, job.JID, job.LeaseToken, result)
		} else {
			_, err = w.client.Fail(ctx, job.JID, job.LeaseToken, options)
		}
		cancel()
		var lost *LeaseLostError
		switch {
		case err == nil:
			counter.Add(1)
			return
		case errors.As(err, &lost):
			w.lost.Add(1)
			return
		case !Retryable(err) || attempt >= 8:
			w.logger.Printf("jobqueue: job %s: outcome not reported: %v", job.JID, err)
			w.unreported.Add(1)
			return
		}
		backoff = nextBackoff(backoff)
		time.Sleep(backoff)
	}
}

// errorClass names err's class for the stored attempt.
func errorClass(err error) string {
	var permanent *permanentError
	if errors.As(err, &permanent) {
		err = permanent.err
	}
	var named ErrorClass
	if errors.As(err, &named) {
		return named.ErrorClass()
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", err), "*")
}

func nextBackoff(previous time.Duration) time.Duration {
	if previous <= 0 {
		return 200 * time.Millisecond
	}
	if next := previous * 2; next < 10*time.Second {
		return next
	}
	return 10 * time.Second
}

func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}
