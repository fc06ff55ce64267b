"""The table, the README section and the profile summary of ``make bench`` (bench/run.py).

Pure functions of the results dictionary that bench/run.py builds and writes as JSON,
so tests/test_bench_report.py checks them without running a benchmark. The results'
shape (every key optional; a missing figure prints as an em dash)::

    {"date": "2026-12-01T12:00:00+00:00", "quick": False, "big_skipped": False,
     "machine": {"cpus": 2, "python": "3.13.0", "django": "6.1.3", "commit": "abc1234",
                 "load_before": [1.0, 0.8, 0.5], "load_after": [...],
                 "databases": {"postgres": "PostgreSQL 15.8", ...}},
     "enqueue": {db: {"single" | "in_txn" | "bulk" | "add_id" | "unique":
                      {"jobs_per_s": 2000, "statements_per_job": 1.0}}},
     "drain": {db: {"layouts": {"1x4": {"median": 900.0, "steady_median": 1200.0}, ...},
                    "statements_per_job": {"total": 0.5, "server_transactions_per_job": 0.4}}},
     "pickup": {db: {"p50_ms": 1.5, "p95_ms": 2.5, "p99_ms": 4.0}},
     "pickup_floor": {"p50_ms": 1.2, "p95_ms": 2.0, "p99_ms": 3.0},  # PostgreSQL
     "big": {"sizes": {"10000": {"rate": 900.0}, "1000000": {"rate": 850.0}}, "ratio": 0.94},
     "profile": {"file": "...", "samples": 1234, "top_self": [["frame", 0.12], ...]},
     "errors": ["drain on mariadb: ..."]}
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

#: The README lines between these two are replaced by each run.
BEGIN = "<!-- make bench: begin (bench/run.py rewrites what follows) -->"
END = "<!-- make bench: end -->"
HEADING = "## Benchmarks (last run)"
DATABASES = ("postgres", "mariadb", "sqlite")
TITLES = {"postgres": "PostgreSQL", "mariadb": "MariaDB", "sqlite": "SQLite"}
DASH = "—"


def _get(data: Any, *path: str) -> Any:
    """Return ``data[path[0]][path[1]]...``, or None where a key is missing."""
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def rate(value: Any) -> str:
    """Format jobs/s: ``1,234``; None: an em dash."""
    return DASH if value is None else f"{value:,.0f}"


def count(value: Any) -> str:
    """Format a per-job count with up to 3 significant digits (``0.54``, ``7``)."""
    return DASH if value is None else f"{value:.3g}"


def ms(value: Any) -> str:
    """Format milliseconds with one decimal."""
    return DASH if value is None else f"{value:.1f}"


def _ratio(value: Any) -> str:
    return DASH if value is None else f"{value:.2f}"


def rows(results: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Return the table's rows: (label, one cell per database in ``DATABASES`` order)."""

    def per_db(cell: Any) -> list[str]:
        return [cell(db) for db in DATABASES]

    def enqueue(case: str) -> Any:
        return lambda db: rate(_get(results, "enqueue", db, case, "jobs_per_s"))

    def statements(db: str) -> str:
        cases = ("single", "add_id", "unique", "bulk")
        found = [_get(results, "enqueue", db, case, "statements_per_job") for case in cases]
        return DASH if all(v is None for v in found) else " / ".join(count(v) for v in found)

    def drain(layout: str, key: str) -> Any:
        return lambda db: rate(_get(results, "drain", db, "layouts", layout, key))

    def percentiles(*path: str) -> str:
        found = [_get(results, *path, f"p{q}_ms") for q in (50, 95, 99)]
        return DASH if all(v is None for v in found) else " / ".join(ms(v) for v in found)

    def pickup(db: str) -> str:
        return percentiles("pickup", db)

    def floor(db: str) -> str:
        return percentiles("pickup_floor") if db == "postgres" else DASH

    def limit_ratio(name: str) -> Any:
        return lambda db: _ratio(_get(results, "limits", db, "ratios", name))

    def rate_held(db: str) -> str:
        measured = _get(results, "limits", "rate", "measured_per_s")
        if db != "postgres" or measured is None:
            return DASH
        return f"{measured:,.1f} ({measured / 500 - 1:+.1%})"

    sizes = sorted(int(size) for size in (_get(results, "big", "sizes") or {}))

    def big(size: int) -> Any:
        return lambda db: (
            rate(_get(results, "big", "sizes", str(size), "rate")) if db == "postgres" else DASH
        )

    table = [
        ("enqueue, 1 job per transaction (jobs/s)", per_db(enqueue("single"))),
        ("enqueue, 5,000 in one transaction (jobs/s)", per_db(enqueue("in_txn"))),
        ("bulk enqueue_many, 5,000 per call (jobs/s)", per_db(enqueue("bulk"))),
        ("add(id=...), 1 per transaction (jobs/s)", per_db(enqueue("add_id"))),
        ("unique_key enqueue, 1 per transaction (jobs/s)", per_db(enqueue("unique"))),
        ("statements per enqueue: single / id / unique / bulk", per_db(statements)),
        ("drain, 1 process x 4 threads, steady (jobs/s)", per_db(drain("1x4", "steady_median"))),
        ("drain, 4 processes x 1 thread, steady (jobs/s)", per_db(drain("4x1", "steady_median"))),
        ("drain 1 x 4, runworkers' start to exit (jobs/s)", per_db(drain("1x4", "median"))),
        ("drain 4 x 1, runworkers' start to exit (jobs/s)", per_db(drain("4x1", "median"))),
        (
            "statements per drained job (Django cursor)",
            per_db(lambda db: count(_get(results, "drain", db, "statements_per_job", "total"))),
        ),
        (
            "server transactions per drained job",
            per_db(
                lambda db: count(
                    _get(results, "drain", db, "statements_per_job", "server_transactions_per_job")
                )
            ),
        ),
        (
            "batch with on_finish / plain drain, 1 x 4 (ratio of steady rates)",
            per_db(lambda db: _ratio(_get(results, "workflows", db, "ratio"))),
        ),
        (
            "batch's on_finish started after its last job (ms)",
            per_db(lambda db: ms(_get(results, "workflows", db, "callback_delay_ms"))),
        ),
        (
            "limits: global concurrency 1000 / unlimited drain, 1 x 4 (ratio)",
            per_db(limit_ratio("global_1000/unlimited")),
        ),
        (
            "limits: concurrency 1 per key, 1,000 keys / unlimited (ratio)",
            per_db(limit_ratio("keys_1000/unlimited")),
        ),
        (
            "limits: 100 keys after 100,000 used / 100 keys ever (ratio)",
            per_db(limit_ratio("keys_100_of_100k/keys_100_fresh")),
        ),
        ('limits: rate "500/s", 4 x 4 workers, starts/s measured', per_db(rate_held)),
        ("pickup p50 / p95 / p99 ms (PostgreSQL: NOTIFY; others: polling)", per_db(pickup)),
        ("pickup floor, plain psycopg without a queue, p50 / p95 / p99 ms", per_db(floor)),
    ]
    for size in sizes:
        table.append((f"drain 1x4 with {size:,} waiting (jobs/s)", per_db(big(size))))
    ratio = _get(results, "big", "ratio")
    if ratio is not None and len(sizes) > 1:
        label = f"ratio {sizes[-1]:,} / {sizes[0]:,} waiting"
        table.append((label, per_db(lambda db: f"{ratio:.2f}" if db == "postgres" else DASH)))
    elif results.get("big_skipped"):
        table.append(("drain with 1,000,000 waiting", per_db(lambda db: "skipped (BENCH_BIG=0)")))
    return table


def render_table(results: dict[str, Any]) -> str:
    """Return the results as a Markdown table, one column per database."""
    lines = [
        "| | " + " | ".join(TITLES[db] for db in DATABASES) + " |",
        "|---|" + "---:|" * len(DATABASES),
    ]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows(results)]
    return "\n".join(lines)


def machine_line(results: dict[str, Any]) -> str:
    """Return one line naming the date, machine, versions and load averages of a run."""
    machine = results.get("machine") or {}
    versions = machine.get("databases") or {}
    parts = [
        str(results.get("date", "?")),
        f"commit {machine.get('commit', '?')}",
        f"{machine.get('cpus', '?')} CPUs",
        f"Python {machine.get('python', '?')}",
        f"Django {machine.get('django', '?')}",
        *(versions[db] for db in DATABASES if db in versions),
    ]

    def load(key: str) -> str:
        values = machine.get(key)
        return " ".join(f"{v:.2f}" for v in values) if values else "?"

    parts.append(f"load average {load('load_before')} before, {load('load_after')} after")
    return "; ".join(parts)


NOTES = """\
How it was measured (`make bench`, bench/run.py; every script is in bench/):

- Enqueue (bench/enqueue.py): no-op jobs from one thread on an emptied table. Statements
  are every `cursor.execute` Django sent during the timed run, over its jobs; BEGIN and
  COMMIT that the driver sends by itself are not among them.
- Drain (bench/drain.py): `runworkers --burst` over jobs enqueued before it, the
  median of the rounds: steady is from the first job's start to the last one's end
  (the rows' timestamps); start to exit includes Python's and Django's start-up and
  the exit. Its statements come from one more in-process drain at 1 x 4 (every
  `cursor.execute` of every thread). Server transactions are PostgreSQL's
  `pg_stat_database` commits plus rollbacks of the scratch database; MariaDB's
  server counters are server-wide, SQLite has none.
- Pickup (bench/pickup.py): an idle `runworkers --concurrency 4`; a job's pickup is its
  handler's start minus the time before its enqueue in another process. PostgreSQL
  wakes the worker by LISTEN/NOTIFY; MariaDB and SQLite have no wake-up across
  processes, so theirs is the polling of `runworkers`' defaults (MIN_SLEEP_MS to
  MAX_SLEEP_MS).
- Pickup floor (bench/pickup_floor.py, PostgreSQL): the same spaced enqueues and
  pickup in plain psycopg, no Django and no threads: an INSERT with its `pg_notify` in
  one statement, and in the listening process one claiming `UPDATE ... SKIP LOCKED
  RETURNING` per notification, on a narrow table. Two synchronous commits and the
  wake-ups between processes: what a LISTEN/NOTIFY queue cannot go under here.
- Big table (bench/bigdrain.py, PostgreSQL): the waiting jobs are inserted by one
  `INSERT ... SELECT generate_series`; `runworkers` 1 x 4 drains them and the rate is
  taken between 10% and 90% of the measured jobs.
- Profile (py-spy, collapsed stacks): one more drain at 1 x 4 on PostgreSQL, py-spy
  attached once 5% of its jobs are done; shares are of the samples with a Python frame."""


def readme_section(results: dict[str, Any], json_path: str = "") -> str:
    """Return the README lines that go between ``BEGIN`` and ``END`` for ``results``."""
    lines = []
    if results.get("quick"):
        lines.append(
            "**A BENCH_QUICK=1 smoke run: few jobs, one round. These numbers are not a "
            "measurement; run `make bench` on a quiet machine.**"
        )
        lines.append("")
    lines.append(f"Run: {machine_line(results)}.")
    lines.append("")
    lines.append(render_table(results))
    top = _get(results, "profile", "top_self")
    if top:
        lines.append("")
        shares = ", ".join(f"`{frame}` {share:.0%}" for frame, share in top[:5])
        lines.append(f"Drain profile (py-spy, self time of the sampled frames): {shares}.")
    elif _get(results, "profile", "error"):
        lines.append("")
        lines.append(f"No drain profile: {_get(results, 'profile', 'error')}.")
    for error in results.get("errors") or []:
        lines.append("")
        lines.append(f"Failed: {error}")
    lines.append("")
    lines.append(NOTES)
    if json_path:
        lines.append("")
        lines.append(f"All figures of the run: `{json_path}` (not committed).")
    return "\n".join(lines)


def splice_readme(text: str, section: str) -> str:
    """Return README ``text`` with the lines between ``BEGIN`` and ``END`` replaced.

    Without the markers, a ``HEADING`` section holding them is appended at the end.
    Raises ValueError when ``END`` comes before ``BEGIN`` or a marker is doubled.
    """
    if BEGIN not in text and END not in text:
        return text.rstrip("\n") + f"\n\n{HEADING}\n\n{BEGIN}\n{section}\n{END}\n"
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError("README must hold each make-bench marker exactly once")
    head, rest = text.split(BEGIN, 1)
    if END not in rest:
        raise ValueError("README's make-bench end marker comes before its begin marker")
    tail = rest.split(END, 1)[1]
    return f"{head}{BEGIN}\n{section}\n{END}{tail}"


_LINE = re.compile(r":\d+\)$")


def summarize_profile(raw: str, top: int = 10) -> list[tuple[str, float]]:
    """Return the ``top`` frames by self time of py-spy's ``--format raw`` output.

    ``raw``: one line per distinct stack, ``frame;frame;...;leaf COUNT``, each frame
    ``function (file:line)``, under a root ``process PID:"command"`` with
    ``--subprocesses``. Frames are merged across lines of one function (the line
    number is dropped); samples with no Python frame (the process root alone) are
    left out. Returns ``[(frame, share of the samples with a Python frame 0..1),
    ...]``, largest first; an empty list when there is no such sample.
    """
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, samples = line.rstrip().rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        frames = stack.split(";")
        if frames[0].startswith("process "):
            frames = frames[1:]
        if not frames:
            continue
        leaf = frames[-1]
        leaves[_LINE.sub(")", leaf)] += int(samples)
        total += int(samples)
    if not total:
        return []
    return [(frame, n / total) for frame, n in leaves.most_common(top)]
