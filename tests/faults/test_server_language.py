"""A PostgreSQL server whose messages are not in English (``lc_messages``).

The prepared-statement errors that mean "a pooler gave this session's transaction
another server session" or "a migration changed a returned column's type" are known
by the server function that raised them, not by their English text: a German server
must be handled as an English one (README, Database notes). The session's messages
are German through ``PGOPTIONS``; scripts/start-fault-servers makes the locale.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.faults.conftest import ROOT, FaultDatabase

pytestmark = pytest.mark.faults


def _speaks_german(fault_db: FaultDatabase) -> bool:
    import psycopg

    server = fault_db.server
    try:
        with psycopg.connect(
            host=server.host, port=server.port, user="postgres", dbname=fault_db.name,
            options="-c lc_messages=de_DE.UTF-8", connect_timeout=5,
        ) as conn:  # fmt: skip
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


@pytest.mark.parametrize("fault_server", ["postgresql"], indirect=True)
def test_prepared_statement_lost_or_changed__handled_in_german_too(
    fault_db: FaultDatabase,
) -> None:
    if not _speaks_german(fault_db):
        pytest.fail(
            "the fault server cannot send German messages (no locale de_DE.UTF-8, or it "
            "started before the locale was made): run scripts/start-fault-servers as root"
        )
    proc = subprocess.run(  # noqa: S603 (our own interpreter and module)
        [sys.executable, "-m", "tests.faults.prepared_lost"],
        cwd=ROOT,
        env=fault_db.env(PGOPTIONS="-c lc_messages=de_DE.UTF-8"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "Division durch Null" in report["language"], report  # the session speaks German
    assert report["statements_swapped"] >= 2, report  # the claim's and the insert's
    # The bind refused (08P01), the statements ran again unprepared, and the alias
    # prepares no more, with the warning that says why.
    assert report["name_taken"] == {"claimed": [2], "still_prepares": False}, report
    assert "prepare_threshold None" in proc.stderr, proc.stderr[-3000:]
    # In a pipeline (a streamed bulk insert): rolled back, then run again.
    assert report["bulk_name_taken"]["swapped"] >= 1, report
    assert report["bulk_name_taken"]["jobs"] == 1200, report
    # The changed plan refused (0A000): every statement forgotten, the claim prepared anew.
    plan = report["plan_changed"]
    assert (plan["claimed"], plan["still_prepares"]) == ([4], True), report
    assert plan["forgotten"], report
