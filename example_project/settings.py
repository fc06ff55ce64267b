"""Settings of the example project (a newsletter sign-up site).

Everything that differs between machines comes from the environment, read with
django-environ:

- ``DATABASE_URL``: ``sqlite:///...`` (default: ``example_project/var/db.sqlite3``),
  ``postgres://user:pass@host:5432/name`` or ``mysql://user:pass@host:3306/name``.
- ``JOBQUEUE_LICENCE_KEY``: a Pro licence key (optional; Core works without one).
- ``EMAIL_BACKEND``: where mail goes (default: files in ``example_project/var/mail``;
  ``django.core.mail.backends.console.EmailBackend`` prints them). No network.
- ``WORKERS_LOG``: the log file with tracebacks (default ``example_project/var/workers.log``;
  the terminal gets one line per warning or error). ``JOBQUEUE_LOG_LEVEL``: the
  ``django_jobqueue`` logger's level (default INFO).
- ``DJANGO_DEBUG``, ``DJANGO_SECRET_KEY``, ``DJANGO_ALLOWED_HOSTS``.
"""

from __future__ import annotations

from pathlib import Path

import django
import environ

PROJECT_DIR = Path(__file__).resolve().parent
BASE_DIR = PROJECT_DIR.parent
VAR_DIR = PROJECT_DIR / "var"

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="example-project-not-secret")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobqueue",
    "example_project.newsletter",
]
if django.VERSION < (6, 0):  # Django 5.2: django.tasks is the django_tasks backport's app.
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]

# Database ---------------------------------------------------------------------

# An empty DATABASE_URL counts as unset (scripts/test sets it empty for SQLite).
DATABASES = {
    "default": env.db_url_config(
        env.str("DATABASE_URL", default="") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
    ),
}
_engine = DATABASES["default"]["ENGINE"]
if _engine == "django.db.backends.sqlite3":
    # One writer at a time: WAL so readers never block the writer, write
    # transactions that take the lock at BEGIN, and a busy timeout (seconds).
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    }
elif _engine == "django.db.backends.mysql":
    # MySQL 8 / MariaDB 10.6+: 4-byte UTF-8, and a UTC session time zone because
    # leases are compared against the database clock.
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        "init_command": "SET time_zone='+00:00'",
        "isolation_level": "read committed",
    }
if _engine != "django.db.backends.sqlite3":
    # Persistent connections, as a production site keeps them: Django's default (0)
    # opens a new server session for every request, which cost a gateway POST more
    # than the enqueue itself. Health checks drop a session the server closed.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if _engine == "django.db.backends.postgresql" and env.bool("DB_POOL", default=False):
    # Under ASGI (docs/deployment.md) each request runs in a thread of its own, so a
    # persistent connection would die with it: psycopg's pool instead (CONN_MAX_AGE 0).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 4, "max_size": 20}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True

# Mail: never the network. Files under var/mail by default. Django 6.1 configures
# mail with MAILERS (EMAIL_BACKEND is deprecated there); older versions need the
# EMAIL_* settings.
_mail_backend = env.str("EMAIL_BACKEND", default="django.core.mail.backends.filebased.EmailBackend")
_mail_dir = VAR_DIR / "mail"
if django.VERSION >= (6, 1):
    MAILERS = {
        "default": {
            "BACKEND": _mail_backend,
            "OPTIONS": {"file_path": str(_mail_dir)} if "filebased" in _mail_backend else {},
        }
    }
else:
    EMAIL_BACKEND = _mail_backend
    EMAIL_FILE_PATH = _mail_dir
DEFAULT_FROM_EMAIL = "The Example Newsletter <newsletter@example.com>"
#: Who gets the daily digest (newsletter.daily_digest).
NEWSLETTER_EDITORS = env.list("NEWSLETTER_EDITORS", default=["editors@example.com"])

# django-jobqueue ----------------------------------------------------------------

# Every key is optional; these are the main knobs (README "Configuration").
JOBQUEUE = {
    # Pro licence (optional): Core works without one.
    "LICENCE_KEY": env.str("JOBQUEUE_LICENCE_KEY", default=""),
    # Worker threads per `runworkers` process (README, "Configuration").
    "CONCURRENCY": 4,
    # Idle sleep of the governor, ms: grows from MIN to MAX while queues are empty.
    "MIN_SLEEP_MS": 50,
    "MAX_SLEEP_MS": 1_000,
    # A claimed job's lease and the heartbeat that extends it, ms.
    "LEASE_MS": 30_000,
    "HEARTBEAT_MS": 5_000,
    # Retries after a failed attempt, and their backoff (ms): 200 ms, 400 ms, ...
    # Small so the demo's retries come due within one `make demo BURST=1`.
    "DEFAULT_MAX_RETRY": 3,
    "BACKOFF_BASE_MS": 200,
    "BACKOFF_MAX_MS": 5_000,
    "BACKOFF_JITTER": 0.25,
    # Run time limit of one attempt, ms, unless the job type says otherwise.
    "DEFAULT_TIMEOUT_MS": 60_000,
    # Per-queue options (docs/design.md#ids): dead letters stay 14 days on "newsletter".
    "QUEUES": {"newsletter": {"keep": "14d"}},
    # How long dead letters and done jobs stay before `manage.py jobqueue prune`.
    "KEEP": "7d",
    "RETENTION": "3d",
    # Periodic plans (README, "Periodic jobs"): the editors' digest every morning at 07:00.
    "SCHEDULES": {
        "daily-digest": {
            "job_type": "newsletter.daily_digest",
            "cron": "0 7 * * *",
            "timezone": "Europe/London",
        },
    },
}

# Django's tasks framework (README, "Using Django's @task"): @task functions run
# as jobs on our workers.
TASKS = {
    "default": {
        "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
        "QUEUES": ["default", "emails", "newsletter"],
        "OPTIONS": {"max_retry": 3, "timeout": "1m"},
    }
}

# Logging: the terminal gets one line per record at WARNING and above (a failed
# attempt: time, level, jid, job type, attempt, error class and message);
# WORKERS_LOG gets everything from INFO up (each job's start and end), tracebacks
# included. scripts/demo empties it at the start of each run and names it.
WORKERS_LOG = Path(env.str("WORKERS_LOG", default=str(VAR_DIR / "workers.log")))
_LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "one_line": {
            "class": "django_jobqueue.worker.logsetup.OneLineFormatter",
            "format": "%(asctime)s %(levelname)s %(message)s",
            "datefmt": "%H:%M:%S",
        },
        "full": {"format": _LOG_FORMAT},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "one_line", "level": "WARNING"},
        "workers_log": {
            "class": "logging.FileHandler",
            "filename": str(WORKERS_LOG),
            "formatter": "full",
            "encoding": "utf-8",
            "delay": True,  # opened at the first record: most commands write none
        },
    },
    "root": {"handlers": ["console", "workers_log"], "level": "WARNING"},
    "loggers": {"django_jobqueue": {"level": env.str("JOBQUEUE_LOG_LEVEL", default="INFO")}},
}
