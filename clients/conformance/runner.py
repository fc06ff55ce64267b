"""The Python client's conformance runner (clients/conformance/README.md).

    python clients/conformance/runner.py run <scenarios_dir>
    python clients/conformance/runner.py worker

``run`` makes every scenario's steps through ``django_jobqueue.client.Client`` and prints
``ok NAME`` / ``not ok NAME: reason`` per scenario, then ``N passed, N failed``; its
exit status is 0 iff all passed. ``worker`` runs ``django_jobqueue.client.Worker`` on
``JOBQUEUE_QUEUE`` at ``JOBQUEUE_CONCURRENCY`` until SIGTERM (it drains, then exits 0).
Environment: ``JOBQUEUE_URL`` and ``JOBQUEUE_TOKENS`` (a JSON file of role: token).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from django_jobqueue.client import Client, GatewayError, JobContext, Worker

LANG = "python"
#: ``${name.path}`` inside a string.
REFERENCE = re.compile(r"\$\{([^}]+)\}")
ENQUEUE_OPTIONS = frozenset(
    (
        "queue", "priority", "delay", "run_at", "expires_ms", "timeout_ms", "max_retry",
        "unique_key", "unique_mode", "unique_ttl_ms", "id", "limit_key", "batch", "after",
        "on_upstream_failure",
    )
)  # fmt: skip
#: A class name's language suffix, dropped to give the canonical name.
SUFFIXES = ("Exception", "Error")


class ScenarioError(Exception):
    """A step that did not hold; its message is the report's reason."""


def env(name: str) -> str:
    """Return environment variable ``name``; ScenarioError if it is unset."""
    value = os.environ.get(name, "").strip()
    if not value:
        raise ScenarioError(f"{name} is not set")
    return value


def tokens() -> dict[str, str]:
    """The roles' tokens of the JSON file ``JOBQUEUE_TOKENS`` names."""
    path = env("JOBQUEUE_TOKENS")
    try:
        return {str(k): str(v) for k, v in json.loads(Path(path).read_text()).items()}
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot read JOBQUEUE_TOKENS {path}: {exc}") from exc


def worker_token(roles: Mapping[str, str]) -> str:
    """The token the conformance worker uses: the ``work`` role's."""
    for role in ("work", "worker", "all", "admin"):
        if role in roles:
            return roles[role]
    raise ScenarioError("JOBQUEUE_TOKENS has no work token")


def to_json(value: Any) -> Any:
    """A client answer (dataclasses, datetimes) as the gateway's JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def canonical_class(error: GatewayError) -> str:
    """The error's class name without a language suffix (``DuplicateJob``)."""
    name = type(error).__name__
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name != suffix:
            return name[: -len(suffix)]
    return name


def error_json(error: GatewayError) -> dict[str, Any]:
    """The error body plus ``status``, ``class`` and ``code``."""
    body = dict(error.body)
    body.update(status=error.status, code=error.code)
    body["class"] = canonical_class(error)
    return body


def mismatch(expected: Any, actual: Any, where: str = "") -> str | None:
    """Why ``actual`` does not contain ``expected``, or None when it does."""
    label = where or "the answer"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"expected an object at {label}, got {json.dumps(actual)}"
        for key, value in expected.items():
            path = f"{where}.{key}" if where else key
            if key not in actual:
                return f"no {path}"
            problem = mismatch(value, actual[key], path)
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"expected {len(expected)} items at {label}, got {json.dumps(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            problem = mismatch(e, a, f"{where}[{i}]")
            if problem:
                return problem
        return None
    same_number = (
        isinstance(expected, int | float)
        and isinstance(actual, int | float)
        and not isinstance(expected, bool)
        and not isinstance(actual, bool)
        and expected == actual
    )
    if same_number or (type(expected) is type(actual) and expected == actual):
        return None
    return f"{label} is {json.dumps(actual)}, expected {json.dumps(expected)}"


def first(step: Mapping[str, Any], *names: str) -> Any:
    """The step's member under the first of ``names`` present (None if none)."""
    for name in names:
        if name in step:
            return step[name]
    return None


def canonical_verb(name: str) -> str:
    """``ids_add``/``id.add`` are ``ids.add``; ``worker.claim`` is ``claim``."""
    verb = name.strip()
    for prefix in ("worker.", "worker_"):
        if verb.startswith(prefix):
            verb = verb[len(prefix) :]
    for prefix in ("ids_", "id_", "id.", "ids."):
        if verb.startswith(prefix):
            return "ids." + verb[len(prefix) :]
    return {"get": "get_job", "batch": "enqueue_batch", "stop": "stop_worker"}.get(verb, verb)


def known(args: Mapping[str, Any], optional: set[str] | frozenset[str], *required: str) -> None:
    """Refuse an unknown argument or a missing required one."""
    for name in args:
        if name not in optional and name not in required:
            raise ScenarioError(f"unknown argument {name}")
    for name in required:
        if name not in args:
            raise ScenarioError(f"missing argument {name}")


def enqueue_options(args: Mapping[str, Any]) -> dict[str, Any]:
    source = args.get("options", args)
    return {k: v for k, v in source.items() if k in ENQUEUE_OPTIONS}


def _some(args: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {n: args[n] for n in names if n in args}


def call(client: Client, verb: str, args: dict[str, Any]) -> Any:
    """The answer of ``verb`` made through ``client``, as JSON."""
    if verb == "enqueue":
        known(args, ENQUEUE_OPTIONS | {"payload", "options"}, "job_type")
        return client.enqueue(args["job_type"], args.get("payload"), **enqueue_options(args))
    if verb == "enqueue_batch":
        known(args, set(), "jobs")
        for job in args["jobs"]:
            known(job, ENQUEUE_OPTIONS | {"payload"}, "job_type")
        return {"results": client.enqueue_batch(args["jobs"])}
    if verb in ("get_job", "cancel"):
        known(args, set(), "jid")
        return client.get_job(args["jid"]) if verb == "get_job" else client.cancel(args["jid"])
    if verb == "retry":
        known(args, set(), "jid")
        return {"retried": client.retry(args["jid"])}
    if verb in ("ids.add", "ids.set", "ids.update"):
        known(args, {"value", "job_type", "at", "delay"}, "queue", "id")
        name = verb[4:]
        method = {"add": client.add, "set": client.set, "update": client.update}[name]
        answer = method(
            args["queue"], args["id"], args.get("value"), **_some(args, "job_type", "at", "delay")
        )
        return {{"add": "added", "set": "set", "update": "updated"}[name]: answer}
    if verb == "ids.cancel":
        known(args, set(), "queue", "id")
        return {"cancelled": client.cancel_id(args["queue"], args["id"])}
    if verb == "ids.get":
        known(args, set(), "queue", "id")
        return client.get(args["queue"], args["id"])
    if verb == "ids.list":
        known(args, {"prefix", "state", "limit", "cursor"}, "queue")
        return client.list(args["queue"], **_some(args, "prefix", "state", "limit", "cursor"))
    if verb == "register":
        optional = {"host", "pid", "languages", "job_types", "concurrency", "version"}
        known(args, optional, "name", "queues")
        return client.register(**args)
    if verb == "claim":
        known(args, {"job_types", "limit", "wait_ms", "worker", "lease_ms"}, "queues")
        extra = _some(args, "job_types", "limit", "wait_ms", "worker", "lease_ms")
        return {"jobs": client.claim(args["queues"], **extra)}
    if verb == "heartbeat":
        known(args, {"lease_ms"}, "jid", "lease_token")
        asked = client.heartbeat(args["jid"], args["lease_token"], **_some(args, "lease_ms"))
        return {"cancel_requested": asked}
    if verb == "complete":
        known(args, {"result"}, "jid", "lease_token")
        return {"status": client.complete(args["jid"], args["lease_token"], args.get("result"))}
    if verb == "fail":
        known(args, {"error", "exception_class", "retry", "cancelled"}, "jid", "lease_token")
        options = _some(args, "exception_class", "retry", "cancelled")
        status = client.fail(args["jid"], args["lease_token"], args.get("error", ""), **options)
        return {"status": status}
    if verb == "stop_worker":
        known(args, set(), "name")
        return {"name": args["name"], "stopped": client.stop_worker(args["name"])}
    raise ScenarioError(f"unknown verb {verb}")


class Scenario:
    """One scenario's steps, run in order, with the values they saved."""

    def __init__(self, url: str, roles: Mapping[str, str]) -> None:
        self.url = url
        self.roles = roles
        self.clients: dict[str, Client] = {}
        # ${run}: unique to this run, so its ids and queues never meet an earlier run's.
        self.saved: dict[str, Any] = {"run": f"{time.time_ns():x}{os.getpid():x}"}

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def client(self, role: str) -> Client:
        if role not in self.roles:
            raise ScenarioError(f"no token of role {role} in JOBQUEUE_TOKENS")
        if role not in self.clients:
            self.clients[role] = Client(self.url, self.roles[role])
        return self.clients[role]

    def run(self, scenario: Mapping[str, Any]) -> None:
        steps = scenario.get("steps")
        if not isinstance(steps, list):
            raise ScenarioError("no steps")
        for n, step in enumerate(steps, 1):
            verb = canonical_verb(str(first(step, "verb", "call", "op") or ""))
            try:
                self.step(step, verb)
            except ScenarioError as exc:
                raise ScenarioError(f"step {n} ({verb}): {exc}") from exc

    def step(self, step: Mapping[str, Any], verb: str) -> None:
        client = self.client(str(first(step, "token", "role", "as") or "all"))
        args = self.resolve(first(step, "args", "params", "with", "input") or {})
        expected_error = first(step, "error", "expect_error", "raises")
        try:
            answer = to_json(call(client, verb, args))
        except GatewayError as exc:
            if expected_error is None:
                raise ScenarioError(f"unexpected {canonical_class(exc)}: {exc}") from exc
            self.check_error(self.resolve(expected_error), exc)
            self.save(step, error_json(exc))
            return
        if expected_error is not None:
            raise ScenarioError(f"expected {json.dumps(expected_error)}, got {json.dumps(answer)}")
        for name in ("expect", "expected", "result"):
            if name in step:
                problem = mismatch(self.resolve(step[name]), answer)
                if problem:
                    raise ScenarioError(f"{problem} in {json.dumps(answer)}")
                break
        self.save(step, answer)

    def save(self, step: Mapping[str, Any], answer: Any) -> None:
        save = step.get("save")
        if save is None:
            return
        if isinstance(save, str):
            self.saved[save] = answer
            return
        for name, path in save.items():
            self.saved[name] = self.lookup(re.sub(r"^\$\.?", "", str(path)), answer)

    def check_error(self, expected: Any, error: GatewayError) -> None:
        kind = canonical_class(error)
        if isinstance(expected, str):
            if expected not in (kind, error.code, type(error).__name__):
                raise ScenarioError(f"expected {expected}, got {kind}: {error}")
            return
        wanted = dict(expected)
        cls = wanted.pop("class", None) or wanted.pop("type", None)
        if cls is not None and cls != kind:
            raise ScenarioError(f"expected {cls}, got {kind}: {error}")
        problem = mismatch(wanted, error_json(error))
        if problem:
            raise ScenarioError(f"{problem} in the error {json.dumps(error_json(error))}")

    def resolve(self, node: Any) -> Any:
        """Replace ``"$name.path"`` with saved values and ``${name.path}`` in text."""
        if isinstance(node, str):
            if node.startswith("$") and not node.startswith("${") and len(node) > 1:
                return self.lookup(node[1:], self.saved)
            return REFERENCE.sub(lambda m: self._text(self.lookup(m.group(1), self.saved)), node)
        if isinstance(node, dict):
            return {k: self.resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self.resolve(v) for v in node]
        return node

    @staticmethod
    def _text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    @staticmethod
    def lookup(path: str, root: Any) -> Any:
        node = root
        for part in (p for p in path.split(".") if p):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise ScenarioError(f"nothing at {path}")
        return node


def run(directory: Path) -> int:
    """Run every scenario of ``directory``; 0 iff all passed."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ScenarioError(f"no scenario JSON in {directory}")
    url, roles = env("JOBQUEUE_URL"), tokens()
    passed = failed = 0
    for path in files:
        name = path.stem
        scenario = Scenario(url, roles)
        try:
            data = json.loads(path.read_text())
            name = data.get("name") or name
            scenario.run(data)
        except (ScenarioError, ValueError, GatewayError) as exc:
            print(f"not ok {name}: {' '.join(str(exc).split())}", flush=True)
            failed += 1
        else:
            print(f"ok {name}", flush=True)
            passed += 1
        finally:
            scenario.close()
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


def worker() -> int:
    """The mixed drain's worker: echo and spawn (README "The worker") until SIGTERM."""
    client = Client(env("JOBQUEUE_URL"), worker_token(tokens()))

    def echo(payload: Any, ctx: JobContext) -> Any:
        return {"lang": LANG, "payload": payload}

    def spawn(payload: Any, ctx: JobContext) -> Any:
        child = client.enqueue(payload["job_type"], payload.get("payload"), queue=payload["queue"])
        return {"lang": LANG, "jid": child.jid}

    def sleep(payload: Any, ctx: JobContext) -> Any:
        time.sleep(payload["ms"] / 1000)
        return {"lang": LANG, "slept": payload["ms"]}

    handlers: dict[str, Callable[[Any, JobContext], Any]] = {
        "conformance.echo": echo,
        "conformance.spawn": spawn,
        "conformance.sleep": sleep,
    }
    concurrency = int(os.environ.get("JOBQUEUE_CONCURRENCY") or 4)
    stats = Worker(
        handlers, client=client, queues=[env("JOBQUEUE_QUEUE")], concurrency=concurrency,
        name=f"conformance-{LANG}-{os.getpid()}",
    ).run()  # fmt: skip
    print(f"conformance ({LANG}): worker stopped: {stats}", file=sys.stderr)
    client.close()
    return 0


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "run":
            return run(Path(argv[1]))
        if argv == ["worker"]:
            return worker()
    except ScenarioError as exc:
        print(f"conformance ({LANG}): {exc}", file=sys.stderr)
        return 2
    print("usage: runner.py run <scenarios_dir> | worker", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
