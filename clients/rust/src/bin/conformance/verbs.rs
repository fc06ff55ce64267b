//! The conformance suite's language-neutral verbs, each made through the Rust client's own
//! call: arguments in the gateway's names (snake_case), answers as the gateway's JSON.

use jobqueue_client::{
    ClaimOptions, Client, Delay, EnqueueOptions, Error, FailOptions, IdValue, JobSpec, ListOptions,
    RegisterOptions,
};
use serde_json::{json, Map, Value};

const ENQUEUE_OPTIONS: &[&str] = &[
    "queue",
    "priority",
    "delay",
    "run_at",
    "expires_ms",
    "timeout_ms",
    "max_retry",
    "unique_key",
    "unique_mode",
    "unique_ttl_ms",
    "id",
    "limit_key",
    "batch",
    "after",
    "on_upstream_failure",
];

/// A call's outcome: the answer, the client's typed error, or a scenario mistake.
pub enum Outcome {
    Answer(Value),
    Refused(Error),
}

/// The answer of `verb` with `args`, through the client; `Err` is a scenario mistake.
pub fn call(client: &Client, verb: &str, args: &Map<String, Value>) -> Result<Outcome, String> {
    let answer = match verb {
        "enqueue" => {
            known(args, ENQUEUE_OPTIONS, &["job_type", "payload", "options"])?;
            let payload = args.get("payload").cloned().unwrap_or(Value::Null);
            client
                .enqueue(&text(args, "job_type")?, payload, &enqueue_options(args)?)
                .map(to_json)
        }
        "enqueue_batch" => {
            known(args, &[], &["jobs"])?;
            let mut jobs = Vec::new();
            for job in required(args, "jobs")?
                .as_array()
                .ok_or("jobs is not an array")?
            {
                let job = job.as_object().ok_or("a job is not an object")?;
                known(job, ENQUEUE_OPTIONS, &["job_type", "payload", "options"])?;
                jobs.push(JobSpec {
                    job_type: text(job, "job_type")?,
                    payload: job.get("payload").cloned().unwrap_or(Value::Null),
                    options: enqueue_options(job)?,
                });
            }
            client
                .enqueue_batch(&jobs)
                .map(|results| json!({ "results": results }))
        }
        "get_job" => {
            known(args, &[], &["jid"])?;
            client.get_job(&text(args, "jid")?).map(to_json)
        }
        "cancel" => {
            known(args, &[], &["jid"])?;
            client.cancel(&text(args, "jid")?).map(to_json)
        }
        "retry" => {
            known(args, &[], &["jid"])?;
            client
                .retry(&text(args, "jid")?)
                .map(|retried| json!({ "retried": retried }))
        }
        "ids.add" | "ids.set" | "ids.update" => {
            known(
                args,
                &["value", "job_type", "at", "delay"],
                &["queue", "id"],
            )?;
            let value = id_value(args)?;
            let (queue, id) = (text(args, "queue")?, text(args, "id")?);
            let ids = client.ids();
            match verb {
                "ids.add" => ids.add(&queue, &id, &value).map(|b| json!({ "added": b })),
                "ids.set" => ids.set(&queue, &id, &value).map(|b| json!({ "set": b })),
                _ => ids
                    .update(&queue, &id, &value)
                    .map(|b| json!({ "updated": b })),
            }
        }
        "ids.cancel" => {
            known(args, &[], &["queue", "id"])?;
            client
                .ids()
                .cancel(&text(args, "queue")?, &text(args, "id")?)
                .map(|b| json!({ "cancelled": b }))
        }
        "ids.get" => {
            known(args, &[], &["queue", "id"])?;
            client
                .ids()
                .get(&text(args, "queue")?, &text(args, "id")?)
                .map(to_json)
        }
        "ids.list" => {
            known(args, &["prefix", "state", "limit", "cursor"], &["queue"])?;
            let options = ListOptions {
                prefix: optional_text(args, "prefix"),
                state: optional_text(args, "state"),
                limit: number(args, "limit").map(|n| n as u32),
                cursor: optional_text(args, "cursor"),
            };
            client
                .ids()
                .list(&text(args, "queue")?, &options)
                .map(to_json)
        }
        "register" => {
            known(
                args,
                &[
                    "host",
                    "pid",
                    "languages",
                    "job_types",
                    "concurrency",
                    "version",
                ],
                &["name", "queues"],
            )?;
            let options = RegisterOptions {
                name: text(args, "name")?,
                host: optional_text(args, "host"),
                pid: number(args, "pid").map(|n| n as u32),
                languages: optional_strings(args, "languages")?,
                queues: strings(required(args, "queues")?)?,
                job_types: optional_strings(args, "job_types")?,
                concurrency: number(args, "concurrency").map(|n| n as u32),
                version: optional_text(args, "version"),
            };
            client.register(&options).map(to_json)
        }
        "claim" => {
            known(
                args,
                &["job_types", "limit", "wait_ms", "worker", "lease_ms"],
                &["queues"],
            )?;
            let options = ClaimOptions {
                queues: strings(required(args, "queues")?)?,
                job_types: optional_strings(args, "job_types")?.unwrap_or_default(),
                limit: number(args, "limit").map(|n| n as u32),
                wait_ms: number(args, "wait_ms").map(|n| n as u64),
                worker: optional_text(args, "worker"),
                lease_ms: number(args, "lease_ms").map(|n| n as u64),
            };
            client.claim(&options).map(|jobs| json!({ "jobs": jobs }))
        }
        "heartbeat" => {
            known(args, &["lease_ms"], &["jid", "lease_token"])?;
            let lease_ms = number(args, "lease_ms").map(|n| n as u64);
            client
                .heartbeat(&text(args, "jid")?, &text(args, "lease_token")?, lease_ms)
                .map(|b| json!({ "cancel_requested": b }))
        }
        "complete" => {
            known(args, &["result"], &["jid", "lease_token"])?;
            let result = args.get("result").cloned().unwrap_or(Value::Null);
            client
                .complete(&text(args, "jid")?, &text(args, "lease_token")?, result)
                .map(|status| json!({ "status": status }))
        }
        "fail" => {
            known(
                args,
                &["error", "exception_class", "retry", "cancelled"],
                &["jid", "lease_token"],
            )?;
            let options = FailOptions {
                error: optional_text(args, "error"),
                exception_class: optional_text(args, "exception_class"),
                retry: args.get("retry").and_then(Value::as_bool),
                cancelled: args.get("cancelled").and_then(Value::as_bool),
            };
            client
                .fail(&text(args, "jid")?, &text(args, "lease_token")?, &options)
                .map(|status| json!({ "status": status }))
        }
        "stop_worker" => {
            known(args, &[], &["name"])?;
            let name = text(args, "name")?;
            client
                .stop_worker(&name)
                .map(|stopped| json!({ "name": name, "stopped": stopped }))
        }
        other => return Err(format!("unknown verb {}", other)),
    };
    Ok(match answer {
        Ok(value) => Outcome::Answer(value),
        Err(error) => Outcome::Refused(error),
    })
}

fn to_json<T: serde::Serialize>(value: T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn enqueue_options(args: &Map<String, Value>) -> Result<EnqueueOptions, String> {
    let source = match args.get("options") {
        Some(Value::Object(options)) => options,
        _ => args,
    };
    Ok(EnqueueOptions {
        queue: optional_text(source, "queue"),
        priority: number(source, "priority"),
        delay: delay(source),
        run_at: optional_text(source, "run_at"),
        expires_ms: number(source, "expires_ms"),
        timeout_ms: number(source, "timeout_ms"),
        max_retry: number(source, "max_retry"),
        unique_key: optional_text(source, "unique_key"),
        unique_mode: optional_text(source, "unique_mode"),
        unique_ttl_ms: number(source, "unique_ttl_ms"),
        id: optional_text(source, "id"),
        limit_key: optional_text(source, "limit_key"),
        batch: number(source, "batch"),
        after: match source.get("after") {
            None | Some(Value::Null) => None,
            Some(value) => Some(strings(value)?),
        },
        on_upstream_failure: optional_text(source, "on_upstream_failure"),
    })
}

fn id_value(args: &Map<String, Value>) -> Result<IdValue, String> {
    Ok(IdValue {
        value: args.get("value").cloned(),
        job_type: optional_text(args, "job_type"),
        at: optional_text(args, "at"),
        delay: delay(args),
    })
}

fn delay(args: &Map<String, Value>) -> Option<Delay> {
    match args.get("delay") {
        Some(Value::String(text)) => Some(Delay::Text(text.clone())),
        Some(Value::Number(n)) => n.as_f64().map(Delay::Seconds),
        _ => None,
    }
}

/// Refuse an argument the verb does not take: a misspelt scenario fails loudly.
fn known(args: &Map<String, Value>, optional: &[&str], required: &[&str]) -> Result<(), String> {
    for name in args.keys() {
        if !optional.contains(&name.as_str()) && !required.contains(&name.as_str()) {
            return Err(format!("unknown argument {}", name));
        }
    }
    Ok(())
}

fn required<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a Value, String> {
    args.get(name)
        .ok_or_else(|| format!("missing argument {}", name))
}

fn text(args: &Map<String, Value>, name: &str) -> Result<String, String> {
    match required(args, name)? {
        Value::String(text) => Ok(text.clone()),
        other => Ok(other.to_string()),
    }
}

fn optional_text(args: &Map<String, Value>, name: &str) -> Option<String> {
    match args.get(name) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => Some(other.to_string()),
    }
}

fn number(args: &Map<String, Value>, name: &str) -> Option<i64> {
    args.get(name).and_then(Value::as_i64)
}

fn strings(value: &Value) -> Result<Vec<String>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{} is not an array", value))?
        .iter()
        .map(|item| {
            item.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{} is not a string", item))
        })
        .collect()
}

fn optional_strings(args: &Map<String, Value>, name: &str) -> Result<Option<Vec<String>>, String> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => strings(value).map(Some),
    }
}
