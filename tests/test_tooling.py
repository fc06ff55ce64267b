"""Smoke tests of the test tooling: the suite runs on the database it was asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
