//! The Rust client's conformance runner (clients/conformance/README.md).
//!
//! - `run <dir>`: every scenario JSON of the directory, through the client's own calls;
//!   prints `ok NAME` or `not ok NAME: reason` per scenario and `N passed, N failed`
//!   last; exit status 0 iff all passed.
//! - `worker`: the client's `Worker` on `JOBQUEUE_QUEUE` at `JOBQUEUE_CONCURRENCY`
//!   (default 4), handling `conformance.echo`, `conformance.spawn` and `conformance.sleep`, until SIGTERM (it drains, then exits 0).
//!
//! Environment: `JOBQUEUE_URL` (the gateway, `http://127.0.0.1:PORT/sdk`) and
//! `JOBQUEUE_TOKENS` (a JSON file mapping a token role to its token).

mod scenario;
mod verbs;

use std::collections::HashMap;
use std::path::Path;
use std::process::exit;

use jobqueue_client::{Client, EnqueueOptions, Worker, WorkerOptions};
use serde_json::{json, Value};

/// Log records on stderr, one line each (the library logs through the `log` crate).
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("jobqueue-worker: {} {}", record.level(), record.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["run", dir] => run(Path::new(dir)),
        ["worker"] => worker(),
        _ => Err("usage: conformance run <scenarios_dir> | worker".to_owned()),
    };
    match outcome {
        Ok(code) => exit(code),
        Err(problem) => {
            eprintln!("conformance (rust): {}", problem);
            exit(2);
        }
    }
}

fn env(name: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        _ => Err(format!("{} is not set", name)),
    }
}

fn tokens() -> Result<HashMap<String, String>, String> {
    let path = env("JOBQUEUE_TOKENS")?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read JOBQUEUE_TOKENS {}: {}", path, e))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("JOBQUEUE_TOKENS {} is not JSON: {}", path, e))?;
    let members = value
        .as_object()
        .ok_or_else(|| format!("JOBQUEUE_TOKENS {} is not an object", path))?;
    Ok(members
        .iter()
        .filter_map(|(role, token)| token.as_str().map(|t| (role.clone(), t.to_owned())))
        .collect())
}

fn run(dir: &Path) -> Result<i32, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {}", dir.display(), e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().map_or(false, |ext| ext == "json"))
        .collect();
    if files.is_empty() {
        return Err(format!("no scenario JSON in {}", dir.display()));
    }
    files.sort();
    let url = env("JOBQUEUE_URL")?;
    let tokens = tokens()?;
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let mut name = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let outcome = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
            .and_then(|scenario| {
                if let Some(title) = scenario.get("name").and_then(Value::as_str) {
                    name = title.to_owned();
                }
                scenario::Scenario::new(&url, &tokens).run(&scenario)
            });
        match outcome {
            Ok(()) => {
                println!("ok {}", name);
                passed += 1;
            }
            Err(reason) => {
                println!("not ok {}: {}", name, reason.replace('\n', " "));
                failed += 1;
            }
        }
    }
    println!("{} passed, {} failed", passed, failed);
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The worker of the mixed drain: echoes each payload back with the language.
fn worker() -> Result<i32, String> {
    let _ = log::set_logger(&LOGGER).map(|()| log::set_max_level(log::LevelFilter::Info));
    let url = env("JOBQUEUE_URL")?;
    let token = scenario::worker_token(&tokens()?)?;
    let queue = env("JOBQUEUE_QUEUE")?;
    let concurrency = match std::env::var("JOBQUEUE_CONCURRENCY") {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("JOBQUEUE_CONCURRENCY is not a number: {}", text))?,
        _ => 4,
    };
    let mut options = WorkerOptions::new(&[queue.as_str()]);
    options.concurrency = concurrency;
    let stats = Worker::new(Client::new(&url, &token), options)
        .handle("conformance.echo", |payload, _ctx| {
            Ok(json!({ "lang": "rust", "payload": payload }))
        })
        // An enqueue from inside a handler, with the worker's own client.
        .handle("conformance.spawn", |payload, ctx| {
            let text = |name: &str| payload.get(name).and_then(Value::as_str).map(str::to_owned);
            let options = EnqueueOptions {
                queue: text("queue"),
                ..EnqueueOptions::default()
            };
            let job_type = text("job_type").unwrap_or_default();
            let child_payload = payload.get("payload").cloned().unwrap_or(Value::Null);
            let child = ctx.client().enqueue(&job_type, child_payload, &options)?;
            Ok(json!({ "lang": "rust", "jid": child.jid }))
        })
        // A job that runs a while: the SIGTERM drain's.
        .handle("conformance.sleep", |payload, _ctx| {
            let ms = payload.get("ms").and_then(Value::as_u64).unwrap_or(0);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            Ok(json!({ "lang": "rust", "slept": ms }))
        })
        .run()
        .map_err(|e| format!("the worker stopped on {}: {}", e.kind(), e))?;
    eprintln!("conformance (rust): worker stopped: {:?}", stats);
    Ok(0)
}
