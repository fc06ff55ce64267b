"""``make bench``: ours on PostgreSQL, MariaDB and SQLite, one table, JSON and the README.

Run by ``make bench`` (which bootstraps the venv and starts the databases first), never
by ``make test``. Each figure comes from one of the scripts beside this one, run in
its own process on a scratch database (bench/common.py's, bench/enqueue.py's)::

    make bench                    # about 15 minutes on 2 CPUs
    BENCH_QUICK=1 make bench      # a 2-minute smoke run: few jobs, one round, 100,000 waiting
    BENCH_BIG=0 make bench        # no 1,000,000-job table

1. bench/enqueue.py per database: single, in one transaction, bulk ``enqueue_many``,
   ``add(id=...)`` and ``unique_key`` enqueues, with statements per job;
2. bench/drain.py per database: ``runworkers --burst`` at 1 x 4 and 4 x 1 (median of
   the rounds) and statements per drained job, then on PostgreSQL a drain under
   ``py-spy record`` whose collapsed stacks are saved beside the results;
3. bench/workflows.py per database: a batch with ``on_finish`` against a plain drain
   (ratio, callback delay) and, on PostgreSQL, the claim's plan with 1,001 blocked
   jobs of a workflow waiting;
4. bench/pickup.py per database (LISTEN/NOTIFY on PostgreSQL, polling elsewhere), and
   on PostgreSQL bench/pickup_floor.py: the same pickup in plain psycopg, no queue;
5. bench/limits.py per database: drains under a global ``concurrency: 1000`` and
   ``concurrency: 1`` per key over 1,000 keys, as ratios (docs/limits.md "Cost"); on
   PostgreSQL also 100 keys after 100,000 were used, and a ``rate: "500/s"`` held by
   4 x 4 workers for 30 s, the starts per second measured;
6. bench/bigdrain.py on PostgreSQL: 10,000 against 1,000,000 waiting.

It prints the table (bench/report.py), writes ``.artifacts/bench/results-<UTC
time>.json`` and ``latest.json``, and rewrites the README's "Benchmarks (last run)"
section between its markers. A phase that fails is named in the table's notes and the
run goes on; the exit status is then 1. py-spy that cannot attach (no ptrace) is no
failure: the README says why there is no profile.

Environment: ``BENCH_QUICK=1``; ``BENCH_BIG=0``; ``BENCH_DATABASES`` (comma-separated
subset of postgres,mariadb,sqlite); ``BENCH_README=0`` leaves README.md alone;
``JQ_BENCH_DB_SUFFIX`` (bench/common.py) keeps two runs on one server apart.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

ARTIFACTS = ROOT / ".artifacts" / "bench"


def settings(environ: dict[str, str]) -> dict[str, Any]:
    """Return the sizes of the run for ``BENCH_QUICK``, ``BENCH_BIG``, ``BENCH_DATABASES``.

    ``big``: the waiting sizes of bench/bigdrain.py, empty when ``BENCH_BIG=0``.
    """
    quick = environ.get("BENCH_QUICK", "") not in ("", "0")
    big = environ.get("BENCH_BIG", "1") not in ("", "0")
    databases = [
        db.strip()
        for db in environ.get("BENCH_DATABASES", ",".join(report.DATABASES)).split(",")
        if db.strip() in report.DATABASES
    ]
    if quick:
        sizes = {"enqueue": 300, "drain": 1_000, "repeat": 1, "pickup": 40}
        sizes |= {"big": [2_000, 100_000] if big else [], "measure": 2_000}
    else:
        sizes = {"enqueue": 3_000, "drain": 10_000, "repeat": 3, "pickup": 300}
        sizes |= {"big": [10_000, 1_000_000] if big else [], "measure": 10_000}
    return {"quick": quick, "databases": databases, **sizes}


def phase(name: str, script: str, *args: str, timeout: float) -> dict[str, Any]:
    """Run ``bench/<script> *args``; return the JSON of its last output line.

    Prints the script's other lines as they are (its own summary). Raises
    RuntimeError with the end of its stderr when it fails or prints no JSON.
    """
    print(f"bench: {name}", flush=True)
    started = time.monotonic()
    try:
        proc = subprocess.run(  # noqa: S603
            [sys.executable, str(BENCH / script), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{name}: no answer in {timeout:.0f} s") from exc
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        print(f"    {line}")
    last = lines[-1] if lines else ""
    last = last.removeprefix("JSON ")
    if proc.returncode != 0 or not last.startswith("{"):
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"{name}: exit {proc.returncode}: {tail}")
    print(f"    ({time.monotonic() - started:.0f} s)", flush=True)
    return json.loads(last)


def versions(databases: list[str]) -> dict[str, str]:
    """Return each database's server version (SQLite: the library's), as one string."""
    found = {}
    if "postgres" in databases:
        out = subprocess.run(  # noqa: S603
            ["psql", "-h127.0.0.1", "-Upostgres", "-d", "postgres", "-tAc", "SHOW server_version"],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        found["postgres"] = f"PostgreSQL {out.stdout.strip().split(' ')[0] or '?'}"
    if "mariadb" in databases:
        out = subprocess.run(  # noqa: S603
            ["mysql", "-h127.0.0.1", "-uroot", "-NBe", "SELECT VERSION()"],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        found["mariadb"] = f"MariaDB {out.stdout.strip().split('-')[0] or '?'}"
    if "sqlite" in databases:
        found["sqlite"] = f"SQLite {sqlite3.sqlite_version}"
    return found


def _git(*args: str) -> str:
    """Return what ``git *args`` prints in the checkout ("" if git fails)."""
    out = subprocess.run(
        ["git", *args],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip()


def machine(databases: list[str]) -> dict[str, Any]:
    """Return the CPU count, Python, Django, commit, load average and database versions."""
    import django

    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "platform": platform.platform(),
        "commit": (commit or "?") + (" (with uncommitted changes)" if dirty else ""),
        "load_before": [round(v, 2) for v in os.getloadavg()],
        "databases": versions(databases),
    }


def profile(drain: dict[str, Any] | None) -> dict[str, Any]:
    """Return the profile entry of PostgreSQL's drain answer, summarised.

    ``{"file" (relative to the repo), "samples", "rate", "top_self"}`` or ``{"error"}``.
    """
    found = dict((drain or {}).get("profile") or {"error": "the drain on postgres failed"})
    if "file" in found:
        raw = Path(found["file"]).read_text(encoding="utf-8")
        found["top_self"] = report.summarize_profile(raw)
        found["file"] = str(Path(found["file"]).relative_to(ROOT))
    else:
        print(f"bench: no drain profile: {found['error']}", flush=True)
    return found


def run(config: dict[str, Any], stamp: str) -> dict[str, Any]:
    """Run every phase of ``config`` (see :func:`settings`); return the results."""
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": config["quick"],
        "big_skipped": not config["big"],
        "config": config,
        "machine": machine(config["databases"]),
        "enqueue": {},
        "drain": {},
        "pickup": {},
        "workflows": {},
        "limits": {},
        "errors": [],
    }

    def attempt(func: Any) -> Any:
        try:
            return func()
        except RuntimeError as exc:
            print(f"bench: FAILED {exc}", flush=True)
            results["errors"].append(str(exc))
            return None

    for db in config["databases"]:
        n = str(config["enqueue"])
        found = attempt(
            lambda db=db, n=n: phase(
                f"enqueue on {db}", "enqueue.py", "--db", db, "-n", n, timeout=900
            ),
        )
        if found is not None:
            results["enqueue"][db] = found
    for db in config["databases"]:
        args = ["--db", db, "--jobs", str(config["drain"]), "--repeat", str(config["repeat"])]
        args += ["--layout", "1x4", "--layout", "4x1", "--statements"]
        profile_path = ARTIFACTS / f"profile-{stamp}-{db}-1x4.txt"
        if db == "postgres":
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            args += ["--profile", str(profile_path)]
        found = attempt(
            lambda db=db, args=args: phase(f"drain on {db}", "drain.py", *args, timeout=1800)
        )
        if found is not None:
            results["drain"][db] = found
        if db == "postgres":
            results["profile"] = profile(found)
    for db in config["databases"]:
        args = ["--db", db, "--jobs", str(config["drain"]), "--rounds", str(config["repeat"])]
        found = attempt(
            lambda db=db, args=args: phase(
                f"batch and workflow on {db}", "workflows.py", *args, timeout=1800
            ),
        )
        if found is not None:
            found.pop("rounds", None)
            results["workflows"][db] = found
    for db in config["databases"]:
        args = ["--db", db, "--jobs", str(config["pickup"])]
        found = attempt(
            lambda db=db, args=args: phase(f"pickup on {db}", "pickup.py", *args, timeout=600),
        )
        if found is not None:
            results["pickup"][db] = found
        if db == "postgres":
            found = attempt(
                lambda args=args: phase(
                    "pickup floor on postgres", "pickup_floor.py", *args[2:], timeout=600
                ),
            )
            if found is not None:
                results["pickup_floor"] = found
    for db in config["databases"]:
        args = ["--db", db, "--jobs", str(config["drain"]), "--repeat", str(config["repeat"])]
        # The 100,000 keys used before (a claim's cost by keys ever used) on PostgreSQL
        # only: their fill takes minutes on the others.
        args += ["--no-old-keys"] if config["quick"] or db != "postgres" else []
        found = attempt(
            lambda db=db, args=args: phase(f"limits on {db}", "limits.py", *args, timeout=1800)
        )
        if found is not None:
            results["limits"][db] = found["trees"]["this"]
        if db == "postgres":
            seconds = "10" if config["quick"] else "30"
            args = ["--db", db, "--rate", "500", "--seconds", seconds, "--processes", "4"]
            found = attempt(
                lambda args=args: phase("rate limit on postgres", "limits.py", *args, timeout=600)
            )
            if found is not None:
                results["limits"]["rate"] = found
    if config["big"] and "postgres" in config["databases"]:
        args = [f"--waiting={size}" for size in config["big"]]
        args += ["--measure", str(config["measure"])]
        found = attempt(
            lambda: phase("drain with a big table on postgres", "bigdrain.py", *args, timeout=1800),
        )
        if found is not None:
            results["big"] = found
    results["machine"]["load_after"] = [round(v, 2) for v in os.getloadavg()]
    return results


def main() -> int:
    """Run the benchmark, print the table, write the JSON and the README section."""
    config = settings(dict(os.environ))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.monotonic()
    results = run(config, stamp)
    results["seconds"] = round(time.monotonic() - started)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"results-{stamp}.json"
    text = json.dumps(results, indent=2) + "\n"
    path.write_text(text, encoding="utf-8")
    (ARTIFACTS / "latest.json").write_text(text, encoding="utf-8")
    print()
    print(f"Run: {report.machine_line(results)}")
    print(report.render_table(results))
    for frame, share in (results.get("profile") or {}).get("top_self", [])[:10]:
        print(f"    profile self {share:6.1%}  {frame}")
    relative = str(path.relative_to(ROOT))
    print(f"bench: {relative} and latest.json written in {results['seconds']} s")
    if os.environ.get("BENCH_README", "1") not in ("", "0"):
        readme = ROOT / "README.md"
        section = report.readme_section(results, relative)
        readme.write_text(
            report.splice_readme(readme.read_text(encoding="utf-8"), section), encoding="utf-8"
        )
        print("bench: README.md's 'Benchmarks (last run)' section rewritten")
    for error in results["errors"]:
        print(f"bench: FAILED {error}")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
