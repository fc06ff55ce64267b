//! A worker loop over the gateway's worker protocol (docs/gateway.md, "The worker
//! protocol"): register, long-poll claims for up to `concurrency` jobs at once, run each on
//! a pool thread with a heartbeat every `heartbeat_ms`, report `complete` or `fail`, and on
//! SIGTERM/SIGINT (or [`Stopper::stop`]) stop claiming, let the running jobs finish and be
//! reported, then mark the worker stopped.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{Client, VERSION};
use crate::error::Error;
use crate::types::{ClaimOptions, ClaimedJob, FailOptions, RegisterOptions};

const MAX_ERROR: usize = 10_000;
/// How often a waiting loop looks at the stop flag a signal sets, ms.
const STOP_POLL_MS: u64 = 100;

/// A handler's failure: its message, its class (stored as the attempt's
/// `exception_class`) and whether to retry it (false: dead letter at once).
///
/// Any `std::error::Error` converts into one (class: the error's type name, retried), so
/// a handler can use `?`.
#[derive(Clone, Debug, PartialEq)]
pub struct JobError {
    pub message: String,
    pub class: String,
    pub retry: bool,
}

impl JobError {
    /// A failure that is retried (backoff, then dead letter past `max_retry`).
    pub fn new(message: impl Into<String>) -> Self {
        JobError {
            message: message.into(),
            class: "JobError".to_owned(),
            retry: true,
        }
    }

    /// A failure that dead-letters the job at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        JobError {
            retry: false,
            ..JobError::new(message)
        }
    }

    /// The same failure with another class name (`billing.CardDeclined`).
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = class.into();
        self
    }
}

impl<E: std::error::Error> From<E> for JobError {
    fn from(error: E) -> Self {
        JobError {
            message: error.to_string(),
            class: std::any::type_name::<E>().to_owned(),
            retry: true,
        }
    }
}

/// A handler's answer: the job's JSON result, or its failure.
pub type HandlerResult = Result<Value, JobError>;

type Handler = Arc<dyn Fn(&Value, &JobContext) -> HandlerResult + Send + Sync>;

/// What a handler knows of its job beside the payload.
#[derive(Debug)]
pub struct JobContext {
    job: ClaimedJob,
    client: Client,
    cancel_requested: AtomicBool,
    lease_lost: AtomicBool,
}

impl JobContext {
    pub fn jid(&self) -> &str {
        &self.job.jid
    }

    pub fn queue(&self) -> &str {
        &self.job.queue
    }

    pub fn job_type(&self) -> &str {
        &self.job.job_type
    }

    /// The id the job holds, if any.
    pub fn id(&self) -> Option<&str> {
        self.job.id.as_deref()
    }

    /// 1 on the first run.
    pub fn attempt(&self) -> i64 {
        self.job.attempt
    }

    pub fn max_retry(&self) -> i64 {
        self.job.max_retry
    }

    /// The attempt's time limit, ms: past it the attempt is reported failed.
    pub fn timeout_ms(&self) -> u64 {
        self.job.timeout_ms
    }

    /// True once a heartbeat answered `cancel_requested`: return an error and the attempt
    /// is reported cancelled.
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::SeqCst)
    }

    /// True once the lease was lost (409 `lease_lost`): the outcome will be dropped.
    pub fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::SeqCst)
    }

    /// The raw claimed job.
    pub fn job(&self) -> &ClaimedJob {
        &self.job
    }

    /// The worker's client, to enqueue follow-up jobs from the handler.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// A worker's options: `WorkerOptions::new(&["emails"])` then set the fields you need.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The queues to claim from (at least one).
    pub queues: Vec<String>,
    /// Jobs run at once, 1..100 (default 1).
    pub concurrency: usize,
    /// The registered name (default `<host>-<pid>-rust`).
    pub name: Option<String>,
    /// A claim's long-poll, ms (default 5000, capped by the gateway's `max_wait_ms`). A
    /// stop waits for the claim in flight, so at most this long, before the drain.
    pub wait_ms: u64,
    /// The lease asked for by each claim and heartbeat, ms (default: the site's `LEASE_MS`).
    pub lease_ms: Option<u64>,
    /// The heartbeat interval, ms (default: the registration's `heartbeat_ms`).
    pub heartbeat_ms: Option<u64>,
    /// Stop gracefully on SIGTERM and SIGINT (default true).
    pub handle_signals: bool,
}

impl WorkerOptions {
    pub fn new(queues: &[&str]) -> Self {
        WorkerOptions {
            queues: queues.iter().map(|q| (*q).to_owned()).collect(),
            concurrency: 1,
            name: None,
            wait_ms: 5_000,
            lease_ms: None,
            heartbeat_ms: None,
            handle_signals: true,
        }
    }
}

/// The counts of one run. `lease_lost`: outcomes dropped on 409 `lease_lost`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub claimed: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub lease_lost: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    cancelled: AtomicU64,
    lease_lost: AtomicU64,
}

struct Slots {
    free: usize,
    unreported: usize,
}

struct Shared {
    stopping: Arc<AtomicBool>,
    slots: Mutex<Slots>,
    changed: Condvar,
    counters: Counters,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            claimed: c.claimed.load(Ordering::SeqCst),
            done: c.done.load(Ordering::SeqCst),
            failed: c.failed.load(Ordering::SeqCst),
            cancelled: c.cancelled.load(Ordering::SeqCst),
            lease_lost: c.lease_lost.load(Ordering::SeqCst),
        }
    }

    fn update(&self, change: impl FnOnce(&mut Slots)) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut slots);
        self.changed.notify_all();
    }
}

/// Stops a running [`Worker`] from another thread: it stops claiming, lets the running jobs
/// finish and be reported, and [`Worker::run`] returns.
#[derive(Clone)]
pub struct Stopper(Arc<Shared>);

impl Stopper {
    pub fn stop(&self) {
        if !self.0.stopping.swap(true, Ordering::SeqCst) {
            log::info!("stopping: running jobs finish first");
        }
        self.0.update(|_| {});
    }
}

/// A worker: handlers by job type, run on a pool of `concurrency` threads.
///
/// ```no_run
/// use jobqueue_client::{Client, Worker, WorkerOptions};
/// let client = Client::new("http://127.0.0.1:8000", "jqt_...");
/// let mut options = WorkerOptions::new(&["emails"]);
/// options.concurrency = 4;
/// let stats = Worker::new(client, options)
///     .handle("emails.send", |payload, _ctx| Ok(serde_json::json!({"sent": payload["to"]})))
///     .run()?; // until SIGTERM
/// # Ok::<(), jobqueue_client::Error>(())
/// ```
///
/// A handler's `Ok` value is reported `complete`; an `Err` is reported `fail` with its
/// class and `retry` ([`JobError::permanent`]: dead letter now); a panic is a failure of
/// class `panic`. A `cancel_requested` heartbeat sets [`JobContext::cancel_requested`]; an
/// `Err` after it is reported cancelled. Past `timeout_ms` the attempt is reported failed
/// (`TimeoutError`) and the handler's late answer dropped (its thread stays busy until it
/// returns: Rust cannot stop a thread). A 409 `lease_lost` drops the outcome. An unreachable
/// gateway, a 503 or a 429 is retried with backoff; any other refusal of the registration
/// or a claim (401, 403...) ends [`Worker::run`] with it, once the running jobs are reported.
pub struct Worker {
    client: Client,
    handlers: HashMap<String, Handler>,
    options: WorkerOptions,
    name: String,
    shared: Arc<Shared>,
}

impl Worker {
    pub fn new(client: Client, options: WorkerOptions) -> Self {
        let name = options
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-{}-rust", hostname(), std::process::id()));
        let shared = Arc::new(Shared {
            stopping: Arc::new(AtomicBool::new(false)),
            slots: Mutex::new(Slots {
                free: options.concurrency.max(1),
                unreported: 0,
            }),
            changed: Condvar::new(),
            counters: Counters::default(),
        });
        Worker {
            client,
            handlers: HashMap::new(),
            options,
            name,
            shared,
        }
    }

    /// Handle jobs of `job_type` with `handler`; the worker claims only the types it handles.
    pub fn handle<F>(mut self, job_type: &str, handler: F) -> Self
    where
        F: Fn(&Value, &JobContext) -> HandlerResult + Send + Sync + 'static,
    {
        self.handlers.insert(job_type.to_owned(), Arc::new(handler));
        self
    }

    /// The name the worker registers under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A handle that stops the worker from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper(Arc::clone(&self.shared))
    }

    /// Register, then claim and run jobs until a stop (SIGTERM, SIGINT, [`Stopper::stop`]).
    ///
    /// Returns the run's counts once every running job has been reported, or the refusal
    /// of the registration or a claim (401, 403...). A worker with no handler, no queue or a
    /// concurrency outside 1..100 is [`Error::Decode`]... no: it panics, as a programming error.
    pub fn run(self) -> Result<Stats, Error> {
        assert!(
            !self.handlers.is_empty(),
            "Worker: handle() at least one job type"
        );
        assert!(
            !self.options.queues.is_empty(),
            "Worker: queues must name at least one queue"
        );
        assert!(
            (1..=100).contains(&self.options.concurrency),
            "Worker: concurrency must be 1..100, got {}",
            self.options.concurrency
        );
        let mut signals = Vec::new();
        if self.options.handle_signals {
            for signal in [libc::SIGTERM, libc::SIGINT] {
                let flag = Arc::clone(&self.shared.stopping);
                // Only an atomic store in the handler: async-signal-safe.
                let id = unsafe {
                    signal_hook_registry::register(signal, move || {
                        flag.store(true, Ordering::SeqCst)
                    })
                };
                match id {
                    Ok(id) => signals.push(id),
                    Err(e) => log::warn!("cannot handle signal {}: {}", signal, e),
                }
            }
        }
        let outcome = self.serve();
        for id in signals {
            signal_hook_registry::unregister(id);
        }
        let s = self.shared.stats();
        log::info!(
            "stopped: claimed={} done={} failed={} cancelled={} lease_lost={}",
            s.claimed,
            s.done,
            s.failed,
            s.cancelled,
            s.lease_lost
        );
        outcome.map(|_| s)
    }

    fn serve(&self) -> Result<(), Error> {
        let job_types: Vec<String> = {
            let mut types: Vec<String> = self.handlers.keys().cloned().collect();
            types.sort();
            types
        };
        let registration = self.retrying(|| {
            self.client.register(&RegisterOptions {
                name: self.name.clone(),
                host: Some(hostname()),
                pid: Some(std::process::id()),
                languages: Some(vec!["rust".to_owned()]),
                queues: self.options.queues.clone(),
                job_types: Some(job_types.clone()),
                concurrency: Some(self.options.concurrency as u32),
                version: Some(VERSION.to_owned()),
            })
        })?;
        let registration = match registration {
            Some(registration) => registration,
            None => return Ok(()), // stopped before the gateway answered
        };
        let heartbeat_ms = self
            .options
            .heartbeat_ms
            .unwrap_or(registration.heartbeat_ms)
            .max(1);
        let wait_ms = self.options.wait_ms.min(registration.max_wait_ms);
        log::info!(
            "registered {}: queues={} job_types={} concurrency={}",
            self.name,
            self.options.queues.join(","),
            job_types.join(","),
            self.options.concurrency
        );
        let (sender, receiver) = mpsc::channel::<ClaimedJob>();
        let receiver = Arc::new(Mutex::new(receiver));
        for n in 0..self.options.concurrency {
            let receiver = Arc::clone(&receiver);
            let runner = Runner {
                client: self.client.clone(),
                handlers: self.handlers.clone(),
                shared: Arc::clone(&self.shared),
                heartbeat_ms,
                lease_ms: self.options.lease_ms,
            };
            thread::Builder::new()
                .name(format!("jobqueue-job-{}", n + 1))
                .spawn(move || loop {
                    let next = receiver.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match next {
                        Ok(job) => runner.execute(job),
                        Err(_) => break, // the loop ended
                    }
                })
                .expect("cannot start a worker thread");
        }
        let outcome = self.claim_loop(&sender, &job_types, wait_ms);
        drop(sender);
        // The drain: every claimed job reported (a timed-out handler may still run).
        {
            let mut slots = self.shared.slots.lock().unwrap_or_else(|e| e.into_inner());
            while slots.unreported > 0 {
                slots = self
                    .shared
                    .changed
                    .wait_timeout(slots, Duration::from_millis(1_000))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        outcome?;
        // Gone from the console and `jobqueue status` at once, not three heartbeats later.
        if let Err(e) = self.client.stop_worker(&self.name) {
            log::warn!("could not report the stop of {}: {}", self.name, e);
        }
        Ok(())
    }

    fn claim_loop(
        &self,
        sender: &mpsc::Sender<ClaimedJob>,
        job_types: &[String],
        wait_ms: u64,
    ) -> Result<(), Error> {
        while !self.shared.stopping() {
            let free = {
                let mut slots = self.shared.slots.lock().unwrap_or_else(|e| e.into_inner());
                while slots.free == 0 && !self.shared.stopping() {
                    slots = self
                        .shared
                        .changed
                        .wait_timeout(slots, Duration::from_millis(STOP_POLL_MS))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                let free = slots.free;
                slots.free = 0;
                free
            };
            if self.shared.stopping() {
                self.shared.update(|s| s.free += free);
                break;
            }
            let options = ClaimOptions {
                queues: self.options.queues.clone(),
                job_types: job_types.to_vec(),
                limit: Some(free as u32),
                wait_ms: Some(wait_ms),
                worker: Some(self.name.clone()),
                lease_ms: self.options.lease_ms,
            };
            let jobs = match self.retrying(|| self.client.claim(&options)) {
                Ok(jobs) => jobs.unwrap_or_default(),
                Err(e) => {
                    self.shared.update(|s| s.free += free);
                    return Err(e);
                }
            };
            let got = jobs.len();
            self.shared.update(|s| {
                s.free += free - got.min(free);
                s.unreported += got;
            });
            for job in jobs {
                self.shared.counters.claimed.fetch_add(1, Ordering::SeqCst);
                // The pool threads outlive the loop, so the channel is open.
                let _ = sender.send(job);
            }
        }
        Ok(())
    }

    /// Call `f` until it answers; back off on an unreachable gateway, 503 or 429.
    /// `Ok(None)` once stopping.
    fn retrying<T>(&self, mut f: impl FnMut() -> Result<T, Error>) -> Result<Option<T>, Error> {
        let mut backoff = 500;
        while !self.shared.stopping() {
            match f() {
                Ok(value) => return Ok(Some(value)),
                Err(e) if e.is_retryable() => {
                    let wait = e.retry_after().map_or(backoff, |s| (s * 1000.0) as u64);
                    log::warn!("{}; trying again in {} ms", e, wait);
                    let until = Instant::now() + Duration::from_millis(wait);
                    while Instant::now() < until && !self.shared.stopping() {
                        thread::sleep(Duration::from_millis(STOP_POLL_MS.min(wait)));
                    }
                    backoff = (backoff * 2).min(10_000);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// What a pool thread needs to run and report one job.
struct Runner {
    client: Client,
    handlers: HashMap<String, Handler>,
    shared: Arc<Shared>,
    heartbeat_ms: u64,
    lease_ms: Option<u64>,
}

/// Set when the handler returned: ends the job's heartbeat thread.
struct Finished {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Runner {
    fn execute(&self, job: ClaimedJob) {
        let ctx = Arc::new(JobContext {
            cancel_requested: AtomicBool::new(job.cancel_requested),
            lease_lost: AtomicBool::new(false),
            client: self.client.clone(),
            job,
        });
        let reported = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(Finished {
            done: Mutex::new(false),
            changed: Condvar::new(),
        });
        let beats = self.heartbeats(
            Arc::clone(&ctx),
            Arc::clone(&reported),
            Arc::clone(&finished),
        );
        let outcome = match self.handlers.get(&ctx.job.job_type) {
            Some(handler) => catch_unwind(AssertUnwindSafe(|| handler(&ctx.job.payload, &ctx)))
                .unwrap_or_else(|panic| {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "the handler panicked".to_owned());
                    Err(JobError::new(message).with_class("panic"))
                }),
            None => Err(JobError::new(format!(
                "no handler for job type {}",
                ctx.job.job_type
            ))),
        };
        {
            let mut done = finished.done.lock().unwrap_or_else(|e| e.into_inner());
            *done = true;
            finished.changed.notify_all();
        }
        let _ = beats.join(); // no heartbeat after the report
        if !reported.swap(true, Ordering::SeqCst) {
            self.report(&ctx, outcome);
            self.shared.update(|s| s.unreported -= 1);
        }
        self.shared.update(|s| s.free += 1);
    }

    /// The job's heartbeat thread: a heartbeat every `heartbeat_ms` until the handler
    /// returns, and the timeout's report if it does not return within `timeout_ms`.
    fn heartbeats(
        &self,
        ctx: Arc<JobContext>,
        reported: Arc<AtomicBool>,
        finished: Arc<Finished>,
    ) -> thread::JoinHandle<()> {
        let client = self.client.clone();
        let shared = Arc::clone(&self.shared);
        let every = Duration::from_millis(self.heartbeat_ms);
        let lease_ms = self.lease_ms;
        let started = Instant::now();
        let deadline = started + Duration::from_millis(ctx.job.timeout_ms.max(1));
        thread::spawn(move || {
            let mut next = started + every;
            let mut beating = true;
            loop {
                {
                    let mut done = finished.done.lock().unwrap_or_else(|e| e.into_inner());
                    loop {
                        if *done {
                            return;
                        }
                        let now = Instant::now();
                        let until = if beating {
                            next.min(deadline)
                        } else {
                            deadline
                        };
                        if now >= until {
                            break;
                        }
                        done = finished
                            .changed
                            .wait_timeout(done, until - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
                if Instant::now() >= deadline {
                    if !reported.swap(true, Ordering::SeqCst) {
                        let message = format!("timed out after {} ms", ctx.job.timeout_ms);
                        report_failure(
                            &client,
                            &shared,
                            &ctx,
                            &JobError::new(message).with_class("TimeoutError"),
                        );
                        shared.update(|s| s.unreported -= 1);
                    }
                    return;
                }
                match client.heartbeat(&ctx.job.jid, &ctx.job.lease_token, lease_ms) {
                    Ok(true) => ctx.cancel_requested.store(true, Ordering::SeqCst),
                    Ok(false) => {}
                    Err(Error::LeaseLost(_)) => {
                        ctx.lease_lost.store(true, Ordering::SeqCst);
                        beating = false;
                    }
                    Err(e) => log::warn!("heartbeat of {} failed: {}", ctx.job.jid, e),
                }
                next += every;
            }
        })
    }

    fn report(&self, ctx: &JobContext, outcome: HandlerResult) {
        if ctx.lease_lost() {
            dropped(&self.shared, ctx);
            return;
        }
        match outcome {
            Ok(result) => match reporting(|| {
                self.client
                    .complete(&ctx.job.jid, &ctx.job.lease_token, result.clone())
            }) {
                Ok(_) => {
                    self.shared.counters.done.fetch_add(1, Ordering::SeqCst);
                }
                Err(Error::LeaseLost(_)) => dropped(&self.shared, ctx),
                Err(e) => log::error!("report of {} failed: {}", ctx.job.jid, e),
            },
            Err(error) => report_failure(&self.client, &self.shared, ctx, &error),
        }
    }
}

fn report_failure(client: &Client, shared: &Shared, ctx: &JobContext, error: &JobError) {
    let cancelled = ctx.cancel_requested();
    let options = FailOptions {
        error: Some(error.message.chars().take(MAX_ERROR).collect()),
        exception_class: Some(error.class.chars().take(200).collect()),
        retry: Some(error.retry),
        cancelled: Some(cancelled),
    };
    match reporting(|| client.fail(&ctx.job.jid, &ctx.job.lease_token, &options)) {
        Ok(status) => {
            let counter = if cancelled {
                &shared.counters.cancelled
            } else {
                &shared.counters.failed
            };
            counter.fetch_add(1, Ordering::SeqCst);
            log::warn!(
                "job {} ({}) failed: {}; stored {}",
                ctx.job.jid,
                ctx.job.job_type,
                error.class,
                status
            );
        }
        Err(Error::LeaseLost(_)) => dropped(shared, ctx),
        Err(e) => log::error!("report of {} failed: {}", ctx.job.jid, e),
    }
}

/// A report, retried while the gateway is unreachable, 503 or 429 (the lease bounds this).
fn reporting<T>(mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let mut backoff = 250;
    let mut tries = 1;
    loop {
        match f() {
            Err(e) if e.is_retryable() && tries < 8 => {
                let wait = e.retry_after().map_or(backoff, |s| (s * 1000.0) as u64);
                thread::sleep(Duration::from_millis(wait));
                backoff = (backoff * 2).min(5_000);
                tries += 1;
            }
            other => return other,
        }
    }
}

fn dropped(shared: &Shared, ctx: &JobContext) {
    shared.counters.lease_lost.fetch_add(1, Ordering::SeqCst);
    log::warn!(
        "job {} ({}): lease lost, outcome dropped",
        ctx.job.jid,
        ctx.job.job_type
    );
}

fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // gethostname writes a NUL-terminated name into the buffer it is given.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr() as *mut libc::c_char, buffer.len()) };
    if rc == 0 {
        let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
        if let Ok(name) = std::str::from_utf8(&buffer[..end]) {
            if !name.is_empty() {
                return name.to_owned();
            }
        }
    }
    std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned())
}
