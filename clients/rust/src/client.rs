//! The blocking client: the producer calls and the worker protocol's calls
//! (docs/gateway.md, "Routes").

use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{ApiError, Error};
use crate::types::{
    CancelResult, ClaimOptions, ClaimedJob, EnqueueOptions, EnqueueResult, FailOptions, IdJob,
    IdValue, Job, JobSpec, ListOptions, Page, RegisterOptions, Registration,
};

/// The client's version, sent at registration.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a path segment keeps unescaped (RFC 3986's unreserved characters).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A client of the gateway. Every call returns the documented answer or the [`Error`]
/// variant of the refusal. Cheap to clone (one connection pool) and `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Client {
    base_url: String,
    token: String,
    timeout: Duration,
    agent: ureq::Agent,
}

impl Client {
    /// A client with a 30 s per-request timeout.
    ///
    /// `url` is the site's root (`http://127.0.0.1:8000`) or the gateway's (`.../sdk`);
    /// `token` a bearer token, `jqt_...` (`manage.py jobqueue token create`).
    pub fn new(url: &str, token: &str) -> Self {
        Client::with_timeout(url, token, Duration::from_secs(30))
    }

    /// A client whose requests time out after `timeout` (beyond a claim's own wait).
    pub fn with_timeout(url: &str, token: &str, timeout: Duration) -> Self {
        let root = url.trim_end_matches('/');
        let base_url = if root.ends_with("/sdk") {
            root.to_owned()
        } else {
            format!("{}/sdk", root)
        };
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .build();
        Client {
            base_url,
            token: token.to_owned(),
            timeout,
            agent,
        }
    }

    /// The gateway's root, ending in `/sdk`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The id verbs of a queue's jobs.
    pub fn ids(&self) -> Ids<'_> {
        Ids { client: self }
    }

    // Producer calls ----------------------------------------------------------

    /// Enqueue one job: `enqueued` (201) with the new jid, or `deduplicated` (200) with
    /// the unique key's holder.
    ///
    /// Errors: [`Error::InvalidRequest`] (an invalid option, `field` names it),
    /// [`Error::DuplicateJob`] (a held id, `jid` is the holder's), [`Error::ProRequired`].
    pub fn enqueue(
        &self,
        job_type: &str,
        payload: Value,
        options: &EnqueueOptions,
    ) -> Result<EnqueueResult, Error> {
        let body = JobSpec {
            job_type: job_type.to_owned(),
            payload,
            options: options.clone(),
        };
        self.call("POST", "/jobs", Some(&body), &[], 0)
    }

    /// Enqueue up to `MAX_BATCH` (1000) jobs, all or nothing: one refused job refuses the
    /// batch (its `index` and `field` say which) and nothing is stored. One answer per job,
    /// in order; a deduplicated job is an answer in its slot.
    pub fn enqueue_batch(&self, jobs: &[JobSpec]) -> Result<Vec<EnqueueResult>, Error> {
        let answer: Value = self.call(
            "POST",
            "/jobs/batch",
            Some(&json!({ "jobs": jobs })),
            &[],
            0,
        )?;
        decode(answer.get("results").cloned().unwrap_or(Value::Null))
    }

    /// The job `jid`; [`Error::NotFound`] when there is none.
    pub fn get_job(&self, jid: &str) -> Result<Job, Error> {
        self.call::<(), _>("GET", &format!("/jobs/{}", segment(jid)), None, &[], 0)
    }

    /// Cancel a waiting job (`cancelled`), or ask a running one to stop (`cancel_requested`).
    pub fn cancel(&self, jid: &str) -> Result<CancelResult, Error> {
        self.call(
            "POST",
            &format!("/jobs/{}/cancel", segment(jid)),
            Some(&json!({})),
            &[],
            0,
        )
    }

    /// Make a dead letter (or a scheduled job) due now; needs the `admin` scope
    /// ([`Error::Forbidden`] otherwise). Answers whether it was made due.
    pub fn retry(&self, jid: &str) -> Result<bool, Error> {
        let answer: Value = self.call(
            "POST",
            &format!("/jobs/{}/retry", segment(jid)),
            Some(&json!({})),
            &[],
            0,
        )?;
        flag(&answer, "retried")
    }

    // The worker protocol -----------------------------------------------------

    /// Register (or refresh) a worker process; answers its lease and heartbeat, ms.
    pub fn register(&self, options: &RegisterOptions) -> Result<Registration, Error> {
        self.call("POST", "/worker/register", Some(options), &[], 0)
    }

    /// Claim up to `limit` due jobs, waiting up to `wait_ms` for one (empty: none came).
    pub fn claim(&self, options: &ClaimOptions) -> Result<Vec<ClaimedJob>, Error> {
        let wait = options.wait_ms.unwrap_or(0);
        let answer: Value = self.call("POST", "/worker/claim", Some(options), &[], wait)?;
        decode(answer.get("jobs").cloned().unwrap_or(Value::Null))
    }

    /// Extend a claimed job's lease (by `lease_ms`, or the site's `LEASE_MS`); answers
    /// whether the job was asked to stop. [`Error::LeaseLost`] when it is no longer held.
    pub fn heartbeat(
        &self,
        jid: &str,
        lease_token: &str,
        lease_ms: Option<u64>,
    ) -> Result<bool, Error> {
        let mut body = json!({ "lease_token": lease_token });
        if let Some(ms) = lease_ms {
            body["lease_ms"] = json!(ms);
        }
        let path = format!("/worker/jobs/{}/heartbeat", segment(jid));
        let answer: Value = self.call("POST", &path, Some(&body), &[], 0)?;
        flag(&answer, "cancel_requested")
    }

    /// Report success with a JSON result; answers the stored status (`done`, or `init`
    /// when an id's `set` asked for one run more). [`Error::LeaseLost`]: drop the outcome.
    pub fn complete(&self, jid: &str, lease_token: &str, result: Value) -> Result<String, Error> {
        let body = json!({ "lease_token": lease_token, "result": result });
        let path = format!("/worker/jobs/{}/complete", segment(jid));
        let answer: Value = self.call("POST", &path, Some(&body), &[], 0)?;
        text(&answer, "status")
    }

    /// Report a failed attempt; answers the stored status (`retry`, `max_retry`, `error`,
    /// `cancelled`, `init`). [`Error::LeaseLost`]: drop the outcome.
    pub fn fail(
        &self,
        jid: &str,
        lease_token: &str,
        options: &FailOptions,
    ) -> Result<String, Error> {
        let mut body = serde_json::to_value(options).map_err(|e| Error::Decode(e.to_string()))?;
        body["lease_token"] = json!(lease_token);
        let path = format!("/worker/jobs/{}/fail", segment(jid));
        let answer: Value = self.call("POST", &path, Some(&body), &[], 0)?;
        text(&answer, "status")
    }

    /// Mark a registered worker stopped (a clean exit); false if it already was.
    /// [`Error::NotFound`] for a name no gateway worker registered.
    pub fn stop_worker(&self, name: &str) -> Result<bool, Error> {
        let answer: Value = self.call(
            "POST",
            "/worker/stop",
            Some(&json!({ "name": name })),
            &[],
            0,
        )?;
        flag(&answer, "stopped")
    }

    // Requests ----------------------------------------------------------------

    /// One request to the gateway: `path` below `/sdk`, already percent-encoded; `body`
    /// sent as JSON when given; `extra_ms` added to the timeout (a claim's wait).
    pub fn request<B: Serialize + ?Sized>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
        query: &[(&str, String)],
        extra_ms: u64,
    ) -> Result<Value, Error> {
        let url = format!("{}{}", self.base_url, path);
        let mut request = self
            .agent
            .request(method, &url)
            .timeout(self.timeout + Duration::from_millis(extra_ms))
            .set("Authorization", &format!("Bearer {}", self.token))
            .set("Accept", "application/json");
        for (name, value) in query {
            request = request.query(name, value);
        }
        let result = match body {
            Some(body) => {
                let text = serde_json::to_string(body).map_err(|e| Error::Decode(e.to_string()))?;
                request
                    .set("Content-Type", "application/json")
                    .send_string(&text)
            }
            None => request.call(),
        };
        match result {
            Ok(response) => {
                let status = response.status();
                let text = read(response, &url)?;
                if text.is_empty() {
                    return Ok(Value::Null);
                }
                serde_json::from_str(&text).map_err(|_| {
                    Error::Decode(format!(
                        "{} answered {} with no JSON: {}",
                        url,
                        status,
                        clip(&text)
                    ))
                })
            }
            Err(ureq::Error::Status(status, response)) => {
                let retry_after = response.header("Retry-After").map(str::to_owned);
                let text = read(response, &url)?;
                let parsed = serde_json::from_str::<Value>(&text).ok();
                Err(Error::from_api(ApiError::from_answer(
                    status,
                    parsed,
                    &text,
                    retry_after.as_deref(),
                )))
            }
            Err(ureq::Error::Transport(transport)) => Err(unreachable(&url, &transport)),
        }
    }

    fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
        query: &[(&str, String)],
        extra_ms: u64,
    ) -> Result<T, Error> {
        decode(self.request(method, path, body, query, extra_ms)?)
    }
}

/// The id verbs of one queue's jobs (`/sdk/queues/{queue}/ids/{id}`): a job holding an id
/// is added, set, updated, cancelled and read by that id, which may contain `/`.
#[derive(Clone, Copy, Debug)]
pub struct Ids<'a> {
    client: &'a Client,
}

impl<'a> Ids<'a> {
    /// Add a job holding `id` unless one holds it (false then, no error).
    pub fn add(&self, queue: &str, id: &str, value: &IdValue) -> Result<bool, Error> {
        flag(&self.post(queue, id, "add", value)?, "added")
    }

    /// Make the job holding `id` have this value and time, creating it if need be.
    pub fn set(&self, queue: &str, id: &str, value: &IdValue) -> Result<bool, Error> {
        flag(&self.post(queue, id, "set", value)?, "set")
    }

    /// Change the scheduled or waiting job holding `id` (false when there is none).
    pub fn update(&self, queue: &str, id: &str, value: &IdValue) -> Result<bool, Error> {
        flag(&self.post(queue, id, "update", value)?, "updated")
    }

    /// Remove the waiting job holding `id`, or ask a running one to stop.
    pub fn cancel(&self, queue: &str, id: &str) -> Result<bool, Error> {
        let path = format!("{}/cancel", id_path(queue, id));
        flag(
            &self
                .client
                .request("POST", &path, Some(&json!({})), &[], 0)?,
            "cancelled",
        )
    }

    /// The job holding `id`, or None when the id is free.
    pub fn get(&self, queue: &str, id: &str) -> Result<Option<IdJob>, Error> {
        match self
            .client
            .call::<(), IdJob>("GET", &id_path(queue, id), None, &[], 0)
        {
            Ok(job) => Ok(Some(job)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// One page of the queue's jobs, by id prefix and state; pass `next` as the cursor.
    pub fn list(&self, queue: &str, options: &ListOptions) -> Result<Page, Error> {
        let mut query = Vec::new();
        if let Some(prefix) = &options.prefix {
            query.push(("prefix", prefix.clone()));
        }
        if let Some(state) = &options.state {
            query.push(("state", state.clone()));
        }
        if let Some(limit) = options.limit {
            query.push(("limit", limit.to_string()));
        }
        if let Some(cursor) = &options.cursor {
            query.push(("cursor", cursor.clone()));
        }
        let path = format!("/queues/{}/jobs", segment(queue));
        self.client.call::<(), Page>("GET", &path, None, &query, 0)
    }

    fn post(&self, queue: &str, id: &str, verb: &str, value: &IdValue) -> Result<Value, Error> {
        let path = format!("{}/{}", id_path(queue, id), verb);
        self.client.request("POST", &path, Some(value), &[], 0)
    }
}

/// A path segment, percent-encoded (`/` too).
pub(crate) fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

fn id_path(queue: &str, id: &str) -> String {
    let parts: Vec<String> = id.split('/').map(segment).collect();
    format!("/queues/{}/ids/{}", segment(queue), parts.join("/"))
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    let shown = clip(&value.to_string());
    serde_json::from_value(value).map_err(|e| Error::Decode(format!("{}: {}", e, shown)))
}

fn flag(answer: &Value, name: &str) -> Result<bool, Error> {
    answer.get(name).and_then(Value::as_bool).ok_or_else(|| {
        Error::Decode(format!(
            "no boolean {:?} in {}",
            name,
            clip(&answer.to_string())
        ))
    })
}

fn text(answer: &Value, name: &str) -> Result<String, Error> {
    answer
        .get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            Error::Decode(format!(
                "no text {:?} in {}",
                name,
                clip(&answer.to_string())
            ))
        })
}

fn read(response: ureq::Response, url: &str) -> Result<String, Error> {
    response.into_string().map_err(|e| {
        Error::Unreachable(ApiError::local(
            "connection_failed",
            format!("reading the answer of {}: {}", url, e),
        ))
    })
}

fn unreachable(url: &str, transport: &ureq::Transport) -> Error {
    let timed_out = matches!(transport.kind(), ureq::ErrorKind::Io)
        && transport
            .to_string()
            .to_ascii_lowercase()
            .contains("timed out");
    let code = if timed_out {
        "timeout"
    } else {
        "connection_failed"
    };
    // ureq's message names the url already: "http://...: Connection Failed: ..."
    let message = transport.to_string();
    let detail = if message.contains(url) {
        message
    } else {
        format!("{}: {}", url, message)
    };
    Error::Unreachable(ApiError::local(code, detail))
}

fn clip(text: &str) -> String {
    text.chars().take(300).collect()
}
