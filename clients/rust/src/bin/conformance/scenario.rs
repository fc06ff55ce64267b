//! One scenario: its steps, run in order through the client, with the values they saved.
//!
//! A scenario is {"name", "steps": [step, ...]}; a step is
//! {"verb" (or "call", "op"), "args" ("with", "params", "input"): the gateway's field names,
//!  "token" ("as", "role"): a role of JOBQUEUE_TOKENS (default "all"),
//!  "expect" ("expected", "result"): a subset of the answer's JSON,
//!  "error" ("raises", "expect_error"): a class (DuplicateJob), a code (duplicate_job), or a
//!    subset of the error body plus "status", "class", "code",
//!  "save": a name for the answer (or the error), or {name: "path.in.answer"}}.
//! In args and expectations "$name.path" is a saved value and "${name.path}" interpolates one;
//! ${run} is unique to the run. Verbs: enqueue, enqueue_batch, get_job, cancel, retry,
//! ids.add|set|update|cancel|get|list, register, claim, heartbeat, complete, fail, stop_worker.

use std::collections::HashMap;

use jobqueue_client::{Client, Error};
use serde_json::{json, Map, Value};

use crate::verbs::{self, Outcome};

/// The token the conformance worker uses: the `work` role's.
pub fn worker_token(tokens: &HashMap<String, String>) -> Result<String, String> {
    for role in ["work", "worker", "all", "admin"] {
        if let Some(token) = tokens.get(role) {
            return Ok(token.clone());
        }
    }
    Err("JOBQUEUE_TOKENS has no work token".to_owned())
}

pub struct Scenario<'a> {
    url: &'a str,
    tokens: &'a HashMap<String, String>,
    clients: HashMap<String, Client>,
    saved: Map<String, Value>,
}

impl<'a> Scenario<'a> {
    pub fn new(url: &'a str, tokens: &'a HashMap<String, String>) -> Self {
        let mut saved = Map::new();
        // ${run}: unique to this run, so a scenario's ids and queues never meet an earlier run's.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        saved.insert(
            "run".to_owned(),
            json!(format!("{:x}{:x}", nanos, std::process::id())),
        );
        Scenario {
            url,
            tokens,
            clients: HashMap::new(),
            saved,
        }
    }

    pub fn run(&mut self, scenario: &Value) -> Result<(), String> {
        let steps = scenario
            .get("steps")
            .and_then(Value::as_array)
            .ok_or("no steps")?;
        for (n, step) in steps.iter().enumerate() {
            let name = first(step, &["verb", "call", "op"])
                .and_then(Value::as_str)
                .unwrap_or("");
            let verb = canonical_verb(name);
            self.step(step, &verb)
                .map_err(|e| format!("step {} ({}): {}", n + 1, verb, e))?;
        }
        Ok(())
    }

    fn step(&mut self, step: &Value, verb: &str) -> Result<(), String> {
        let role = first(step, &["token", "role", "as"])
            .and_then(Value::as_str)
            .unwrap_or("all");
        let args = match first(step, &["args", "params", "with", "input"]) {
            Some(Value::Null) | None => json!({}),
            Some(args) => self.resolve(args)?,
        };
        let args = args.as_object().ok_or("args is not an object")?.clone();
        let expected_error = match first(step, &["error", "expect_error", "raises"]) {
            Some(Value::Null) | None => None,
            Some(error) => Some(self.resolve(error)?),
        };
        let client = self.client(role)?;
        match verbs::call(&client, verb, &args)? {
            Outcome::Refused(error) => {
                let expected = expected_error
                    .ok_or_else(|| format!("unexpected {}: {}", error.kind(), error))?;
                check_error(&expected, &error)?;
                self.save(step, &error_json(&error))?;
            }
            Outcome::Answer(answer) => {
                if let Some(expected) = expected_error {
                    return Err(format!("expected {}, got the answer {}", expected, answer));
                }
                if let Some(expected) = first(step, &["expect", "expected", "result"]) {
                    let expected = self.resolve(expected)?;
                    if let Some(problem) = mismatch(&expected, &answer, "") {
                        return Err(format!("{} in {}", problem, answer));
                    }
                }
                self.save(step, &answer)?;
            }
        }
        Ok(())
    }

    /// `"save": "name"` keeps the whole answer; `"save": {"name": "path.in.answer"}` parts of it.
    fn save(&mut self, step: &Value, answer: &Value) -> Result<(), String> {
        match step.get("save") {
            Some(Value::String(name)) => {
                self.saved.insert(name.clone(), answer.clone());
            }
            Some(Value::Object(names)) => {
                for (name, path) in names {
                    let path = path.as_str().unwrap_or("");
                    let mut node = Some(answer);
                    for part in path
                        .trim_start_matches('$')
                        .trim_start_matches('.')
                        .split('.')
                        .filter(|p| !p.is_empty())
                    {
                        node = match node {
                            Some(Value::Array(items)) => {
                                part.parse::<usize>().ok().and_then(|i| items.get(i))
                            }
                            Some(Value::Object(members)) => members.get(part),
                            _ => None,
                        };
                    }
                    let value =
                        node.ok_or_else(|| format!("nothing at {} to save in {}", path, answer))?;
                    self.saved.insert(name.clone(), value.clone());
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn client(&mut self, role: &str) -> Result<Client, String> {
        if let Some(client) = self.clients.get(role) {
            return Ok(client.clone());
        }
        let token = self
            .tokens
            .get(role)
            .ok_or_else(|| format!("no token of role {} in JOBQUEUE_TOKENS", role))?;
        let client = Client::new(self.url, token);
        self.clients.insert(role.to_owned(), client.clone());
        Ok(client)
    }

    /// Replace `"$name.path"` strings with saved values and `${name.path}` in text.
    fn resolve(&self, value: &Value) -> Result<Value, String> {
        Ok(match value {
            Value::String(text)
                if text.starts_with('$') && !text.starts_with("${") && text.len() > 1 =>
            {
                self.lookup(&text[1..])?
            }
            Value::String(text) => {
                let mut out = String::new();
                let mut rest = text.as_str();
                while let Some(start) = rest.find("${") {
                    let end = rest[start..]
                        .find('}')
                        .ok_or_else(|| format!("unclosed reference in {:?}", text))?;
                    out.push_str(&rest[..start]);
                    match self.lookup(&rest[start + 2..start + end])? {
                        Value::String(s) => out.push_str(&s),
                        other => out.push_str(&other.to_string()),
                    }
                    rest = &rest[start + end + 1..];
                }
                out.push_str(rest);
                Value::String(out)
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.resolve(item))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(members) => {
                let mut copy = Map::new();
                for (name, member) in members {
                    copy.insert(name.clone(), self.resolve(member)?);
                }
                Value::Object(copy)
            }
            other => other.clone(),
        })
    }

    fn lookup(&self, path: &str) -> Result<Value, String> {
        let mut parts = path.split('.');
        let first = parts.next().unwrap_or("");
        let mut node = self
            .saved
            .get(first)
            .ok_or_else(|| format!("nothing saved at {}", path))?;
        for part in parts {
            let next = match node {
                Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
                Value::Object(members) => members.get(part),
                _ => None,
            };
            node = next.ok_or_else(|| format!("nothing saved at {}", path))?;
        }
        Ok(node.clone())
    }
}

fn error_json(error: &Error) -> Value {
    let mut body = match error.api() {
        Some(api) => api.body.clone(),
        None => json!({ "error": "decode", "detail": error.to_string() }),
    };
    if let Value::Object(members) = &mut body {
        members.insert("status".to_owned(), json!(error.status()));
        members.insert("class".to_owned(), json!(error.kind()));
        members.insert("code".to_owned(), json!(error.code()));
    }
    body
}

fn check_error(expected: &Value, error: &Error) -> Result<(), String> {
    if let Value::String(want) = expected {
        // A class (DuplicateJob) or a code (duplicate_job).
        if want != error.kind() && want != error.code() {
            return Err(format!(
                "expected {}, got {}: {}",
                want,
                error.kind(),
                error
            ));
        }
        return Ok(());
    }
    let mut wanted = expected.clone();
    if let Value::Object(members) = &mut wanted {
        let class = members.remove("class").or_else(|| members.remove("type"));
        if let Some(Value::String(class)) = class {
            if class != error.kind() {
                return Err(format!(
                    "expected {}, got {}: {}",
                    class,
                    error.kind(),
                    error
                ));
            }
        }
    }
    let actual = error_json(error);
    match mismatch(&wanted, &actual, "") {
        Some(problem) => Err(format!("{} in the error {}", problem, actual)),
        None => Ok(()),
    }
}

/// A step's member under the first of its names that is present.
fn first<'v>(step: &'v Value, names: &[&str]) -> Option<&'v Value> {
    names.iter().find_map(|name| step.get(*name))
}

/// A verb's canonical name: `ids_add`, `id.add` are `ids.add`; `worker.claim` is `claim`.
pub fn canonical_verb(name: &str) -> String {
    let mut verb = name.trim();
    if verb.starts_with("worker.") || verb.starts_with("worker_") {
        verb = &verb[7..];
    }
    for prefix in ["ids_", "id_", "id.", "ids."] {
        if let Some(rest) = verb.strip_prefix(prefix) {
            return format!("ids.{}", rest);
        }
    }
    match verb {
        "get" => "get_job",
        "batch" | "enqueue_many" => "enqueue_batch",
        "stop" => "stop_worker",
        other => other,
    }
    .to_owned()
}

/// Why `actual` does not contain `expected`, or None when it does.
pub fn mismatch(expected: &Value, actual: &Value, at: &str) -> Option<String> {
    let label = if at.is_empty() { "the answer" } else { at };
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (name, value) in want {
                let path = if at.is_empty() {
                    name.clone()
                } else {
                    format!("{}.{}", at, name)
                };
                match got.get(name) {
                    None => return Some(format!("no {}", path)),
                    Some(member) => {
                        if let Some(problem) = mismatch(value, member, &path) {
                            return Some(problem);
                        }
                    }
                }
            }
            None
        }
        (Value::Object(_), other) => {
            Some(format!("expected an object at {}, got {}", label, other))
        }
        (Value::Array(want), Value::Array(got)) if want.len() == got.len() => want
            .iter()
            .zip(got)
            .enumerate()
            .find_map(|(i, (w, g))| mismatch(w, g, &format!("{}[{}]", at, i))),
        (Value::Array(want), other) => Some(format!(
            "expected {} items at {}, got {}",
            want.len(),
            label,
            other
        )),
        (Value::Number(want), Value::Number(got)) => {
            if want.as_f64() == got.as_f64() {
                None
            } else {
                Some(format!("{} is {}, expected {}", label, got, want))
            }
        }
        (want, got) if want == got => None,
        (want, got) => Some(format!("{} is {}, expected {}", label, got, want)),
    }
}
