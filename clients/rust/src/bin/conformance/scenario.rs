//! One scenario: its steps, run in order through the client, with the values they saved.

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
            let verb = step.get("verb").and_then(Value::as_str).unwrap_or("");
            self.step(step, verb)
                .map_err(|e| format!("step {} ({}): {}", n + 1, verb, e))?;
        }
        Ok(())
    }

    fn step(&mut self, step: &Value, verb: &str) -> Result<(), String> {
        let role = step.get("token").and_then(Value::as_str).unwrap_or("all");
        let args = match step.get("args") {
            Some(args) => self.resolve(args)?,
            None => json!({}),
        };
        let args = args.as_object().ok_or("args is not an object")?.clone();
        let expected_error = match step.get("error") {
            Some(error) => Some(self.resolve(error)?),
            None => None,
        };
        let client = self.client(role)?;
        let save = step.get("save").and_then(Value::as_str);
        match verbs::call(&client, verb, &args)? {
            Outcome::Refused(error) => {
                let expected = expected_error
                    .ok_or_else(|| format!("unexpected {}: {}", error.kind(), error))?;
                check_error(&expected, &error)?;
                if let Some(name) = save {
                    self.saved.insert(name.to_owned(), error_json(&error));
                }
            }
            Outcome::Answer(answer) => {
                if let Some(expected) = expected_error {
                    return Err(format!("expected {}, got the answer {}", expected, answer));
                }
                if let Some(expected) = step.get("expect") {
                    let expected = self.resolve(expected)?;
                    if let Some(problem) = mismatch(&expected, &answer, "") {
                        return Err(format!("{} in {}", problem, answer));
                    }
                }
                if let Some(name) = save {
                    self.saved.insert(name.to_owned(), answer);
                }
            }
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
    if let Some(class) = expected.get("class").and_then(Value::as_str) {
        if class != error.kind() {
            return Err(format!(
                "expected {}, got {}: {}",
                class,
                error.kind(),
                error
            ));
        }
    }
    let actual = error_json(error);
    match mismatch(expected, &actual, "") {
        Some(problem) => Err(format!("{} in the error {}", problem, actual)),
        None => Ok(()),
    }
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
