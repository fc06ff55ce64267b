//! A client of django-jobqueue's HTTP gateway (`/sdk/`, docs/gateway.md in the
//! repository), blocking, on `ureq` and `serde_json`:
//!
//! - [`Client`]: the producer calls (enqueue, batches, the id verbs, a job by jid, cancel,
//!   retry) and the worker protocol's calls;
//! - [`Worker`]: a thread-pool worker loop with heartbeats, cancel requests, timeouts and a
//!   graceful stop on SIGTERM;
//! - [`Error`]: one variant per error code of the gateway.

mod client;
mod error;
mod types;
mod worker;

pub use client::{Client, Ids, VERSION};
pub use error::{ApiError, Error};
pub use types::{
    CancelResult, ClaimOptions, ClaimedJob, Delay, EnqueueOptions, EnqueueResult, ErrorEntry,
    FailOptions, IdJob, IdValue, Job, JobSpec, ListOptions, Page, RegisterOptions, Registration,
};
pub use worker::{HandlerResult, JobContext, JobError, Stats, Stopper, Worker, WorkerOptions};
