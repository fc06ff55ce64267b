"""Tests of the tooling: the suite runs on the database it was asked for, and the
scripts/ helpers (pytest-summary, system-packages, start-databases, bootstrap's
stamp) do what their headers say, run for real as subprocesses."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.db import connection

#: DATABASE_URL schemes (django-environ's) and the vendor each must give.
SCHEME_VENDORS = {
    "postgres": "postgresql",
    "postgresql": "postgresql",
    "pgsql": "postgresql",
    "psql": "postgresql",
    "mysql": "mysql",
    "sqlite": "sqlite",
}


def expected_vendor() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        return "sqlite"
    return SCHEME_VENDORS[url.split(":", 1)[0]]


def test_settings__use_the_database_named_by_database_url(db_vendor: str) -> None:
    assert db_vendor == expected_vendor()


@pytest.mark.django_db
def test_settings__connect_to_that_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert connection.vendor == expected_vendor()


@pytest.mark.vendor("sqlite")
@pytest.mark.django_db
def test_settings__sqlite_tests_use_a_wal_file() -> None:
    assert not connection.is_in_memory_db()
    assert Path(connection.settings_dict["NAME"]).is_file()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone() == ("wal",)


@pytest.mark.vendor("mysql")
@pytest.mark.django_db
def test_settings__mysql_session_is_utc_and_utf8mb4() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT @@session.time_zone, @@character_set_connection, @@character_set_database"
        )
        assert cursor.fetchone() == ("+00:00", "utf8mb4", "utf8mb4")


@pytest.mark.vendor("postgresql")
def test_vendor_marker__runs_only_on_its_vendor(db_vendor: str) -> None:
    assert db_vendor == "postgresql"


@pytest.mark.django_db(transaction=True)
def test_subprocess_env__sees_rows_of_the_test_database(subprocess_env: dict[str, str]) -> None:
    User.objects.create(username="tooling-smoke")
    code = (
        "import django; django.setup(); "
        "from django.contrib.auth.models import User; "
        "print(User.objects.filter(username='tooling-smoke').count())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"

#: A small suite with one test of every outcome; test_pass prints a fake summary
#: line, which pytest's own closing line (printed after it) must win over.
SAMPLE_SUITE = """
import warnings

import pytest


def test_pass():
    print("99 passed in 9.99s")


def test_pass2():
    pass


def test_fail():
    assert False


@pytest.mark.skip(reason="sample")
def test_skip():
    pass


@pytest.mark.xfail
def test_xfail():
    assert False


@pytest.mark.xfail
def test_xpass():
    pass


@pytest.fixture
def broken():
    raise RuntimeError("sample")


def test_error(broken):
    pass


def test_warn():
    warnings.warn("sample", UserWarning)
"""

EVERY_OUTCOME = {
    "passed": 3,
    "failed": 1,
    "errors": 1,
    "skipped": 1,
    "xfailed": 1,
    "xpassed": 1,
    "deselected": 0,
    "warnings": 1,
}
NONE = dict.fromkeys(EVERY_OUTCOME, 0)


def run_sample_suite(directory: Path, *flags: str) -> str:
    """Run pytest on SAMPLE_SUITE in ``directory`` with ``flags``; return its output."""
    (directory / "pytest.ini").write_text("[pytest]\n")
    (directory / "test_sample.py").write_text(SAMPLE_SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", *flags],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode in (0, 1, 5), result.stdout + result.stderr  # 5: none ran
    return result.stdout + result.stderr


def pytest_summary(output: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPTS / "pytest-summary"],
        input=output,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def parsed_counts(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    line, counts = result.stdout.splitlines()
    pairs = dict(pair.split("=") for pair in counts.split())
    return {key: int(value) for key, value in pairs.items()}


@pytest.mark.vendor("sqlite")
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), EVERY_OUTCOME),
        (("-q",), EVERY_OUTCOME),
        (("-s",), EVERY_OUTCOME),
        (("-q", "--color=yes"), EVERY_OUTCOME),
        (("-p", "no:warnings", "-q"), {**EVERY_OUTCOME, "warnings": 0}),
        (("-x",), {**NONE, "passed": 2, "failed": 1}),
        (("-q", "-x"), {**NONE, "passed": 2, "failed": 1}),
        (("-k", "pass"), {**NONE, "passed": 2, "xpassed": 1, "deselected": 5}),
        (("-q", "-k", "nothing_matches"), {**NONE, "deselected": 8}),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else None,
)
def test_pytest_summary__reads_real_pytest_output_whatever_the_flags(
    tmp_path: Path, flags: tuple[str, ...], expected: dict[str, int]
) -> None:
    output = run_sample_suite(tmp_path, *flags)
    result = pytest_summary(output)
    assert result.returncode == 0, result.stderr + output
    assert parsed_counts(result) == expected
    line = result.stdout.splitlines()[0]
    assert "=" not in line and "\x1b" not in line
    assert line.endswith("s") and " in " in line
    # Both forms are exercised: the "= ... =" rule by default, the bare line with -q.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    rule_line = next(raw for raw in plain.splitlines() if line in raw)
    assert rule_line.startswith("=") == ("-q" not in flags), rule_line


@pytest.mark.vendor("sqlite")
def test_pytest_summary__fails_when_the_output_has_no_summary(tmp_path: Path) -> None:
    output = run_sample_suite(tmp_path, "-qq")  # pytest -qq prints no summary line
    assert "passed" not in output
    result = pytest_summary(output)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "no pytest summary line" in result.stderr


NODE_TAP = """TAP version 13
# Subtest: producer calls
    # Subtest: enqueue
    ok 1 - enqueue
    # tests 9
    # pass 9
ok 1 - producer calls
not ok 2 - worker
1..2
# tests 7
# suites 1
# pass 4
# fail 1
# cancelled 1
# skipped 1
# todo 0
# duration_ms 1234.5
"""


@pytest.mark.vendor("sqlite")
def test_pytest_summary__reads_node_test_tap_totals() -> None:
    result = pytest_summary(NODE_TAP)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "4 passed, 2 failed, 1 skipped in 1.2s (node --test)"
    assert parsed_counts(result) == {**NONE, "passed": 4, "failed": 2, "skipped": 1}


def scripts_test(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run scripts/test on SQLite alone, in its own temporary folder and database."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JOBQUEUE_TEST_", "DJANGO_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env |= {"JOBQUEUE_TEST_DATABASES": "sqlite", "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [SCRIPTS / "test", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


ONE_TEST = "tests/test_tooling.py::test_settings__use_the_database_named_by_database_url"


@pytest.mark.vendor("sqlite")
def test_scripts_test__counts_a_quiet_run(tmp_path: Path) -> None:
    result = scripts_test(tmp_path, "-q", ONE_TEST)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sqlite      PASSED: 1 passed in " in result.stdout
    assert result.stdout.splitlines()[-1] == "all: 1 passed, 0 failed, 0 skipped"


@pytest.mark.vendor("sqlite")
def test_scripts_test__fails_a_run_whose_summary_it_cannot_read(tmp_path: Path) -> None:
    result = scripts_test(tmp_path, "-qq", ONE_TEST)  # pytest passes, prints no summary
    assert result.returncode == 1, result.stdout + result.stderr
    assert "sqlite      FAILED (pytest exit code 0, but its output has no summary" in (
        result.stdout
    )
    assert result.stdout.splitlines()[-1] == "all: 0 passed, 0 failed, 0 skipped"


def system_packages(packages: str, *, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    """Run scripts/system-packages mysql with ``packages`` as its package list."""
    command = ["bash", str(SCRIPTS / "system-packages"), "mysql"]
    if as_nobody:
        # The script's text as an argument: nobody may not read the work tree.
        script = (SCRIPTS / "system-packages").read_text()
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c"]
        command += [script, "system-packages", "mysql"]
    return subprocess.run(
        command,
        env={**os.environ, "JOBQUEUE_SYSTEM_PACKAGES_MYSQL": packages},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


needs_dpkg = pytest.mark.skipif(
    subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode,
    reason="no dpkg-query: scripts/system-packages checks nothing here",
)


@needs_dpkg
@pytest.mark.vendor("sqlite")
def test_system_packages__does_nothing_when_all_are_installed() -> None:
    result = system_packages("bash coreutils")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@needs_dpkg
@pytest.mark.vendor("sqlite")
def test_system_packages__names_the_missing_ones_in_one_line_when_not_root() -> None:
    as_nobody = os.geteuid() == 0
    if as_nobody and subprocess.run(["sh", "-c", "command -v setpriv"]).returncode:
        pytest.skip("running as root without setpriv to drop to nobody")
    result = system_packages("bash jobqueue-no-such-package", as_nobody=as_nobody)
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("system-packages: FAILED: missing system packages")
    assert "jobqueue-no-such-package" in line
    assert "bash" not in line.replace("/bin/bash", "")


@pytest.mark.vendor("sqlite")
def test_start_databases__leaves_a_server_on_another_host_alone() -> None:
    # 192.0.2.1 is TEST-NET-1: a connection attempt would hang, not be refused.
    start = time.monotonic()
    result = subprocess.run(
        [
            SCRIPTS / "start-databases",
            "postgres=postgres://postgres@192.0.2.1:5432/test",
            "mariadb=mysql://root@127.0.0.1:3307/test",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "start-databases: postgres: 192.0.2.1:5432 is not this machine's default server;"
        " leaving it alone",
        "start-databases: mariadb: 127.0.0.1:3307 is not this machine's default server;"
        " leaving it alone",
    ]
    assert time.monotonic() - start < 2


@pytest.mark.vendor("postgresql", "mysql")
def test_start_databases__is_silent_when_the_server_answers(db_vendor: str) -> None:
    url = os.environ["DATABASE_URL"]
    name = {"postgresql": "postgres", "mysql": "mariadb"}[db_vendor]
    result = subprocess.run(
        [SCRIPTS / "start-databases", f"{name}={url}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    # Silent for this machine's default server (it answers: the suite runs on
    # it); one line for a server elsewhere (a URL may point at one).
    where = urlsplit(url)
    if where.hostname in ("127.0.0.1", "localhost") and where.port in (None, 5432, 3306):
        assert result.stderr == ""
    else:
        assert result.stderr.endswith("is not this machine's default server; leaving it alone\n")


@pytest.mark.vendor("sqlite")
def test_bootstrap__does_nothing_when_the_extras_asked_for_are_installed(tmp_path: Path) -> None:
    python = subprocess.run(
        [SCRIPTS / "find-python"], capture_output=True, text=True, check=True
    ).stdout.strip()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    # The stamp hashes both pyproject.toml files, the app's then the client's.
    both = (ROOT / "pyproject.toml").read_bytes()
    both += (ROOT / "clients" / "python" / "pyproject.toml").read_bytes()
    pyproject = hashlib.sha256(both).hexdigest()
    # tasks-backport: bootstrap asks for it itself on Python 3.11.
    extras = "example,mysql,tasks-backport,test"
    stamp = f"python={python}\ndjango=\npyproject={pyproject}\nextras={extras}\n"
    (venv / ".bootstrap-stamp").write_text(stamp)
    for asked in (["example"], ["test", "mysql"], ["example,test"]):
        result = subprocess.run(
            [SCRIPTS / "bootstrap", *asked],
            env={**os.environ, "VENV": str(venv), "PYTHON": python},
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert (result.returncode, result.stderr) == (0, ""), asked
    assert sorted(p.name for p in venv.iterdir()) == [".bootstrap-stamp", "bin"]
