"""Django settings for the test suite.

The database comes from ``DATABASE_URL`` (django-environ syntax), e.g.
``postgres://postgres@127.0.0.1:5432/test`` or ``mysql://root@127.0.0.1:3306/test``.
Without it the suite runs on SQLite, on a *file* (never ``:memory:``) so that
worker subprocesses started by the tests open the same test database.

Environment knobs, all optional:

- ``DATABASE_URL``: the database, as above.
- ``JOBQUEUE_TEST_SQLITE``: the SQLite file when ``DATABASE_URL`` is unset
  (default ``<tempdir>/jobqueue-test.sqlite3``; the test database sits beside it
  as ``...-test.sqlite3``).
- ``JOBQUEUE_TEST_DB_SUFFIX``: appended to the PostgreSQL/MariaDB test database
  name (``test_<name>_<suffix>``) so that concurrent runs against one server do
  not drop each other's test database; ``scripts/test`` sets it per run.
- ``JOBQUEUE_TEST_PGBOUNCER``: set (to the URL of the PostgreSQL server behind it)
  when ``DATABASE_URL`` goes through PgBouncer in transaction pooling mode, as
  ``scripts/test``'s pgbouncer leg does: psycopg then prepares no statement and
  Django opens no server-side cursor (neither survives a transaction pooler), and
  tests that must see the server itself (``tests.conftest.direct_postgres_url``)
  connect there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-jobqueue-tests-not-secret"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobqueue",
    "tests.testapp",
    # The example project's app, so tests/test_example_project.py can use its models.
    "example_project.newsletter",
]
# Django 5.2: the tasks framework is the django_tasks backport, set up as its docs say:
# an installed app, without which no system check runs the TASKS backends' checks.
if django.VERSION < (6, 0) and importlib.util.find_spec("django_tasks"):
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database -------------------------------------------------------------------

_sqlite_default = os.environ.get(
    "JOBQUEUE_TEST_SQLITE", str(Path(tempfile.gettempdir()) / "jobqueue-test.sqlite3")
)
DATABASES = {
    "default": environ.Env.db_url_config(
        os.environ.get("DATABASE_URL") or f"sqlite:///{Path(_sqlite_default).resolve()}"
    ),
}
_default = DATABASES["default"]
_engine = _default["ENGINE"]

if _engine == "django.db.backends.sqlite3":
    # One writer at a time: WAL so readers never block the writer, immediate
    # write transactions so a transaction that will write takes the lock at
    # BEGIN (no deadlock on lock upgrade), and a busy timeout in seconds.
    # ``init_command`` is supported by the SQLite backend since Django 5.1.
    _default["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    }
    _name = Path(_default["NAME"])
    # A file, not Django's in-memory default, so subprocesses share it.
    _default["TEST"] = {"NAME": str(_name.with_name(f"{_name.stem}-test{_name.suffix}"))}
elif _engine == "django.db.backends.mysql":
    # UTC session time zone: leases compare against the database clock (Now()).
    _default["OPTIONS"] = {
        "charset": "utf8mb4",
        "init_command": "SET time_zone='+00:00'",
        "isolation_level": "read committed",
    }
    _default["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
elif _engine == "django.db.backends.postgresql" and os.environ.get("JOBQUEUE_TEST_PGBOUNCER"):
    # Transaction pooling: a prepared statement or a named cursor lives in one
    # server session, and the next transaction may get another one.
    _default["OPTIONS"] = {"prepare_threshold": None}
    _default["DISABLE_SERVER_SIDE_CURSORS"] = True

if _engine != "django.db.backends.sqlite3" and os.environ.get("JOBQUEUE_TEST_DB_SUFFIX"):
    _default.setdefault("TEST", {})["NAME"] = (
        f"test_{_default['NAME']}_{os.environ['JOBQUEUE_TEST_DB_SUFFIX']}"
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Internationalisation and time ----------------------------------------------

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True

STATIC_URL = "/static/"

# django-jobqueue --------------------------------------------------------------

# The app's defaults (django_jobqueue.core.conf); tests change keys with
# override_settings(JOBQUEUE={...}).
# Worker subprocesses started by tests/workers_helpers.py get the test process's
# current JOBQUEUE (overrides included) as JSON in JOBQUEUE_TEST_JOBQUEUE.
JOBQUEUE: dict[str, object] = json.loads(os.environ.get("JOBQUEUE_TEST_JOBQUEUE") or "{}")

# Django's tasks framework (Django 6, or the django_tasks backport on 5.2): @task
# functions run on our workers (tests/test_tasks.py, tests/testapp/jobtypes/tasks.py).
TASKS = {
    "default": {
        "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
        "QUEUES": ["default", "tasks-other"],
    }
}

# Logging ----------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
