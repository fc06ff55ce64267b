//! The gateway's JSON shapes (docs/gateway.md, "Routes" and "Shapes"): options in, answers
//! out. Options are plain structs with `Default`: every `None` is left out of the body, so
//! the gateway applies its default. Times are ISO 8601 strings.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A duration: `"500ms"`, `"5s"`, `"1m"`, or a number of seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Delay {
    /// `"500ms"`, `"5s"`, `"1m"`.
    Text(String),
    /// Seconds.
    Seconds(f64),
}

impl From<&str> for Delay {
    fn from(text: &str) -> Self {
        Delay::Text(text.to_owned())
    }
}

impl From<String> for Delay {
    fn from(text: String) -> Self {
        Delay::Text(text)
    }
}

impl From<f64> for Delay {
    fn from(seconds: f64) -> Self {
        Delay::Seconds(seconds)
    }
}

impl From<std::time::Duration> for Delay {
    fn from(duration: std::time::Duration) -> Self {
        Delay::Seconds(duration.as_secs_f64())
    }
}

/// The options of one job, as `enqueue_job` takes them:
/// `EnqueueOptions { queue: Some("emails".into()), priority: Some(1), ..Default::default() }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EnqueueOptions {
    /// The queue (default: the job type's, else `default`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// 1 runs first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Run no sooner than this from now. Not with `run_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay: Option<Delay>,
    /// Run no sooner than this time, ISO 8601 with an offset. Not with `delay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<String>,
    /// Dead-letter the job if it is not claimed within this many ms of its run time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    /// One attempt's time limit, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
    /// Retries after the first attempt (0: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retry: Option<i64>,
    /// A second job with this key (while the first holds it) is deduplicated to the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// `while_locked`, or (Pro) `until_executing`, `until_executed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_mode: Option<String>,
    /// How long the unique key is held at most, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_ttl_ms: Option<i64>,
    /// An id the job holds; a held id is [`crate::Error::DuplicateJob`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The key a partitioned limit counts the job under (docs/limits.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_key: Option<String>,
    /// An open batch's id the job joins (docs/workflows.md); `enqueue` only, not a batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<i64>,
    /// The jids the job waits for (docs/workflows.md): it is `blocked` until each is
    /// done. `enqueue` only, not a batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
    /// What an upstream job's death does to it: `cancel` (the default), `skip` or
    /// `ignore`; with `after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_upstream_failure: Option<String>,
}

/// One job of a batch ([`crate::Client::enqueue_batch`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobSpec {
    /// The job type, e.g. `emails.send`.
    pub job_type: String,
    /// Any JSON value.
    pub payload: Value,
    /// Its options.
    #[serde(flatten)]
    pub options: EnqueueOptions,
}

impl JobSpec {
    /// A job with the default options.
    pub fn new(job_type: &str, payload: Value) -> Self {
        JobSpec {
            job_type: job_type.to_owned(),
            payload,
            options: EnqueueOptions::default(),
        }
    }
}

/// `enqueued` with the new jid, or `deduplicated` with the jid of the key's holder.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct EnqueueResult {
    pub status: String,
    pub jid: String,
}

/// A failed attempt, as [`Job::last_error`] shows it (`message` reads `<Class>: <error>`).
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct ErrorEntry {
    pub attempt: Option<i64>,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub exception_class: String,
    pub at: Option<String>,
}

/// A job by jid. `state`: scheduled, waiting, running, failed, done, cancelled, blocked; `payload`
/// and `result` are null for a secure job type.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct Job {
    pub jid: String,
    pub queue: String,
    pub job_type: String,
    pub id: Option<String>,
    pub status: String,
    pub state: String,
    pub attempt: i64,
    pub max_retry: i64,
    pub priority: i64,
    pub secure: bool,
    #[serde(default)]
    pub payload: Value,
    #[serde(default)]
    pub result: Value,
    pub last_error: Option<ErrorEntry>,
    pub cancel_requested: bool,
    pub run_at: String,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub expires_at: Option<String>,
}

/// A job as the id verbs' `get` and `list` show it.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct IdJob {
    pub id: Option<String>,
    #[serde(default)]
    pub value: Value,
    pub state: String,
    pub at: String,
    pub attempt: i64,
    pub jid: String,
    pub queue: String,
    pub job_type: String,
    pub priority: i64,
    pub max_retry: i64,
    #[serde(default)]
    pub result: Value,
    #[serde(default)]
    pub message: String,
    pub cancel_requested: bool,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// A page of [`crate::Ids::list`]; `next` is the following page's cursor.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct Page {
    pub jobs: Vec<IdJob>,
    pub next: Option<String>,
}

/// The value and time of an id verb (`add`, `set`, `update`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IdValue {
    /// The job's value (its payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The job type (default: the queue's one job type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_type: Option<String>,
    /// When it runs, ISO 8601 with an offset. Not with `delay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Run no sooner than this from now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay: Option<Delay>,
}

/// The filters of [`crate::Ids::list`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListOptions {
    /// Only ids starting with this text.
    pub prefix: Option<String>,
    /// Only jobs in this state.
    pub state: Option<String>,
    /// At most this many jobs on the page.
    pub limit: Option<u32>,
    /// The page after a previous page's `next`.
    pub cursor: Option<String>,
}

/// `cancelled`: a waiting job stopped; `cancel_requested`: a running one asked to.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct CancelResult {
    pub cancelled: bool,
    pub cancel_requested: bool,
}

/// A worker's registration: its name and queues are required.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RegisterOptions {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub languages: Option<Vec<String>>,
    pub queues: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_types: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// What a registered worker should use: lease, heartbeat interval, longest claim wait, ms.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct Registration {
    pub name: String,
    pub lease_ms: u64,
    pub heartbeat_ms: u64,
    pub max_wait_ms: u64,
}

/// A claim: up to `limit` due jobs of `queues` (and `job_types`), waiting `wait_ms` for one.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClaimOptions {
    pub queues: Vec<String>,
    /// Only these job types (empty: any type).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub job_types: Vec<String>,
    /// 1..100 (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// How long to wait for a job, 0..30000 ms (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// The registered worker's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The lease, ms (default: the site's `LEASE_MS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

/// A claimed job: run it, heartbeat it, report on it with its `lease_token`.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct ClaimedJob {
    pub jid: String,
    pub queue: String,
    pub job_type: String,
    pub id: Option<String>,
    #[serde(default)]
    pub payload: Value,
    pub attempt: i64,
    pub max_retry: i64,
    pub priority: i64,
    /// One attempt's time limit, ms.
    pub timeout_ms: u64,
    pub lease_token: String,
    pub lease_expires_at: Option<String>,
    pub cancel_requested: bool,
}

/// A failed attempt's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FailOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error's class (`billing.CardDeclined`): stored as the attempt's `exception_class`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exception_class: Option<String>,
    /// false: dead-letter at once (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// true: the handler stopped on a cancel request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
}
