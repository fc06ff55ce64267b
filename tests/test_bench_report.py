"""make bench's table, README splice and profile summary (bench/report.py): pure functions
of a results dictionary, checked without running a benchmark (no timing asserted)."""

from __future__ import annotations

import pytest

from bench import report
from bench.run import settings

RESULTS = {
    "date": "2026-12-01T12:00:00+00:00",
    "quick": False,
    "machine": {
        "cpus": 2,
        "python": "3.13.0",
        "django": "6.1.3",
        "commit": "abc1234",
        "load_before": [1.5, 1.0, 0.5],
        "load_after": [2.0, 1.25, 0.75],
        "databases": {"postgres": "PostgreSQL 15.8", "sqlite": "SQLite 3.46.1"},
    },
    "enqueue": {
        "postgres": {
            "single": {"jobs_per_s": 2607, "statements_per_job": 1.0},
            "bulk": {"jobs_per_s": 40123, "statements_per_job": 0.0012},
            "add_id": {"jobs_per_s": 2001, "statements_per_job": 2.0},
            "unique": {"jobs_per_s": 1900, "statements_per_job": 3.0},
        },
    },
    "drain": {
        "postgres": {
            "layouts": {
                "1x4": {"median": 2384.4, "steady_median": 2900.6},
                "4x1": {"median": 2749.0, "steady_median": 3100.0},
            },
            "statements_per_job": {"total": 0.5412, "server_transactions_per_job": 0.43},
        },
        "sqlite": {"layouts": {"1x4": {"median": 255.0, "steady_median": 300.0}}},
    },
    "pickup": {"postgres": {"p50_ms": 1.62, "p95_ms": 2.5, "p99_ms": 4.54}},
    "workflows": {"postgres": {"ratio": 0.923, "callback_delay_ms": 77.4}},
    "pickup_floor": {"db": "postgres", "p50_ms": 1.21, "p95_ms": 1.96, "p99_ms": 3.04},
    "big": {"sizes": {"10000": {"rate": 2000.0}, "1000000": {"rate": 1880.0}}, "ratio": 0.94},
    "profile": {"top_self": [["execute (django/db/backends/utils.py)", 0.125]]},
}


def cells(table: str, label: str) -> list[str]:
    """Return the cells after ``label`` in the Markdown ``table``."""
    for line in table.splitlines():
        parts = [part.strip() for part in line.strip("|").split("|")]
        if parts[0] == label:
            return parts[1:]
    raise AssertionError(f"no row {label!r} in\n{table}")


def test_table_has_one_column_per_database_and_dashes_for_missing_figures():
    table = report.render_table(RESULTS)
    assert table.splitlines()[0] == "| | PostgreSQL | MariaDB | SQLite |"
    assert cells(table, "enqueue, 1 job per transaction (jobs/s)") == ["2,607", "—", "—"]
    assert cells(table, "bulk enqueue_many, 5,000 per call (jobs/s)") == ["40,123", "—", "—"]
    assert cells(table, "statements per enqueue: single / id / unique / bulk") == [
        "1 / 2 / 3 / 0.0012",
        "—",
        "—",
    ]
    assert cells(table, "drain, 1 process x 4 threads, steady (jobs/s)") == ["2,901", "—", "300"]
    assert cells(table, "drain, 4 processes x 1 thread, steady (jobs/s)") == ["3,100", "—", "—"]
    assert cells(table, "drain 1 x 4, runworkers' start to exit (jobs/s)") == ["2,384", "—", "255"]
    assert cells(table, "drain 4 x 1, runworkers' start to exit (jobs/s)") == ["2,749", "—", "—"]
    assert cells(table, "statements per drained job (Django cursor)") == ["0.541", "—", "—"]
    assert cells(table, "server transactions per drained job") == ["0.43", "—", "—"]
    assert cells(table, "pickup p50 / p95 / p99 ms (PostgreSQL: NOTIFY; others: polling)") == [
        "1.6 / 2.5 / 4.5",
        "—",
        "—",
    ]
    assert cells(table, "pickup floor, plain psycopg without a queue, p50 / p95 / p99 ms") == [
        "1.2 / 2.0 / 3.0",
        "—",
        "—",
    ]
    assert cells(table, "drain 1x4 with 10,000 waiting (jobs/s)") == ["2,000", "—", "—"]
    assert cells(table, "drain 1x4 with 1,000,000 waiting (jobs/s)") == ["1,880", "—", "—"]
    assert cells(table, "ratio 1,000,000 / 10,000 waiting") == ["0.94", "—", "—"]


def test_table_of_an_empty_run_and_a_skipped_big_table():
    table = report.render_table({"big_skipped": True})
    assert cells(table, "enqueue, 1 job per transaction (jobs/s)") == ["—", "—", "—"]
    assert (
        cells(table, "pickup floor, plain psycopg without a queue, p50 / p95 / p99 ms") == ["—"] * 3
    )
    assert cells(table, "drain with 1,000,000 waiting") == ["skipped (BENCH_BIG=0)"] * 3


def test_machine_line_names_date_versions_and_load():
    line = report.machine_line(RESULTS)
    assert line.startswith("2026-12-01T12:00:00+00:00; commit abc1234; 2 CPUs; Python 3.13.0")
    assert "PostgreSQL 15.8; SQLite 3.46.1" in line
    assert line.endswith("load average 1.50 1.00 0.50 before, 2.00 1.25 0.75 after")


def test_readme_section_labels_a_quick_run_and_names_errors_and_the_json():
    section = report.readme_section(
        {**RESULTS, "quick": True, "errors": ["drain on mariadb: exit 1: boom"]},
        ".artifacts/bench/results-x.json",
    )
    assert section.startswith("**A BENCH_QUICK=1 smoke run")
    assert "Failed: drain on mariadb: exit 1: boom" in section
    assert "`execute (django/db/backends/utils.py)` 12%" in section
    assert section.rstrip().endswith("`.artifacts/bench/results-x.json` (not committed).")
    assert "smoke" not in report.readme_section(RESULTS)
    no_profile = report.readme_section({"profile": {"error": "py-spy exited 1: ptrace"}})
    assert "No drain profile: py-spy exited 1: ptrace." in no_profile


def test_splice_replaces_only_between_the_markers_and_reruns_replace_it():
    text = f"# Title\n\nBefore.\n\n{report.BEGIN}\nplaceholder\n{report.END}\n\n## More\nAfter.\n"
    once = report.splice_readme(text, "first run")
    assert (
        once
        == f"# Title\n\nBefore.\n\n{report.BEGIN}\nfirst run\n{report.END}\n\n## More\nAfter.\n"
    )
    twice = report.splice_readme(once, "second run")
    assert twice == once.replace("first run", "second run")
    assert report.splice_readme(twice, "second run") == twice


def test_splice_appends_a_section_without_markers_and_refuses_broken_ones():
    appended = report.splice_readme("# Title\n", "a run")
    assert appended == f"# Title\n\n{report.HEADING}\n\n{report.BEGIN}\na run\n{report.END}\n"
    with pytest.raises(ValueError, match="before its begin"):
        report.splice_readme(f"{report.END}\n{report.BEGIN}\n", "x")
    with pytest.raises(ValueError, match="exactly once"):
        report.splice_readme(f"{report.BEGIN}\n{report.BEGIN}\n{report.END}\n", "x")


def test_profile_summary_merges_lines_of_one_function_by_self_time():
    raw = "\n".join(
        [
            'process 1:"python -m django runworkers";main (m.py:1);claim (foreman.py:10) 6',
            'process 1:"python -m django runworkers";main (m.py:1);claim (foreman.py:12) 2',
            'process 1:"python -m django runworkers";main (m.py:1);as_sql (compiler.py:90) 2',
            'process 1:"python -m django runworkers" 7',
            "",
            "not a stack line",
        ]
    )
    assert report.summarize_profile(raw) == [
        ("claim (foreman.py)", 0.8),
        ("as_sql (compiler.py)", 0.2),
    ]
    assert report.summarize_profile(raw, top=1) == [("claim (foreman.py)", 0.8)]
    assert report.summarize_profile("") == []


def test_settings_of_the_default_quick_and_partial_runs():
    default = settings({})
    assert default["databases"] == ["postgres", "mariadb", "sqlite"]
    assert default["big"] and default["big"] == [10_000, 1_000_000] and not default["quick"]
    quick = settings({"BENCH_QUICK": "1", "BENCH_BIG": "0", "BENCH_DATABASES": "sqlite, nope"})
    assert quick["quick"] and quick["big"] == [] and quick["databases"] == ["sqlite"]
    assert quick["drain"] < default["drain"] and quick["repeat"] == 1


def test_table_shows_the_batch_ratio_and_callback_delay():
    table = report.render_table(RESULTS)
    label = "batch with on_finish / plain drain, 1 x 4 (ratio of steady rates)"
    assert cells(table, label) == ["0.92", "—", "—"]
    assert cells(table, "batch's on_finish started after its last job (ms)")[0] == report.ms(77.4)


def test_table_shows_the_limits_ratios_and_the_rate_held():
    results = {
        "limits": {
            "postgres": {
                "ratios": {
                    "global_1000/unlimited": 0.861,
                    "keys_1000/unlimited": 0.617,
                    "keys_100_of_100k/keys_100_fresh": 1.04,
                }
            },
            "sqlite": {"ratios": {"global_1000/unlimited": 0.7, "keys_1000/unlimited": 0.5}},
            "rate": {"rate": 500, "seconds": 30.0, "measured_per_s": 511.9},
        }
    }
    table = report.render_table(results)
    assert cells(table, "limits: global concurrency 1000 / unlimited drain, 1 x 4 (ratio)") == [
        "0.86",
        "—",
        "0.70",
    ]
    assert cells(table, "limits: concurrency 1 per key, 1,000 keys / unlimited (ratio)") == [
        "0.62",
        "—",
        "0.50",
    ]
    label = "limits: 100 keys after 100,000 used / 100 keys ever (ratio)"
    assert cells(table, label) == ["1.04", "—", "—"]
    label = 'limits: rate "500/s", 4 x 4 workers, starts/s measured'
    assert cells(table, label) == ["511.9 (+2.4%)", "—", "—"]
