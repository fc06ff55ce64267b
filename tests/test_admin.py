"""The admin of jobs, through the test client as a superuser: the changelist, its
paginator, a job's page and its sections, and how times are shown.

Actions, a job's buttons and the schedules' admin are in tests/test_admin_actions.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_jobqueue.admin.changelist import EstimatedCountPaginator, planner_rows
from django_jobqueue.admin.display import when
from django_jobqueue.models import Job, JobStatus
from tests import admin_helpers
from tests.admin_helpers import CHANGELIST, XSS, detail
from tests.maintenance_helpers import make_job, make_jobs, running

pytestmark = pytest.mark.django_db

#: A superuser's client (tests/admin_helpers.py), found by the tests under this name.
admin_client = admin_helpers.admin_client


def changelist(client: Client, **params: Any) -> Any:
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def listed(response: Any) -> set[str]:
    return {job.jid for job in response.context["cl"].result_list}


def icon(html: str, field: str) -> str:
    """Return the alt text of the boolean icon in the read-only field ``field``."""
    row = html.split(f"field-{field}", 1)[1].split("field-", 1)[0]
    return row.split('alt="', 1)[1].split('"', 1)[0]


# Changelist ------------------------------------------------------------------------


def test_changelist__columns_and_no_full_count(admin_client: Client) -> None:
    jobs = make_jobs(3, queue="emails", job_type="maint.noop")

    with CaptureQueriesContext(connection) as queries:
        response = changelist(admin_client)

    html = response.content.decode()
    for job in jobs:
        assert job.jid in html
    for header in ("Jid", "Job type", "Queue", "State", "Attempt", "Run at"):
        assert f">{header}<" in html
    assert ">Updated at<" not in html  # on the job's page only
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts, "the paginator counts (capped)"
    assert all("LIMIT" in sql.upper() for sql in counts), counts
    assert response.context["cl"].result_count == 3


def test_changelist__filters(admin_client: Client) -> None:
    now = timezone.now()
    done = make_job(queue="emails", job_type="maint.noop", status=JobStatus.DONE)
    dead = make_job(queue="reports", job_type="maint.secret", status=JobStatus.MAX_RETRY)
    locked = make_job(
        queue="reports",
        unique_key="report:7",
        unique_expires_at=now + timedelta(hours=1),
    )
    stale = make_job(queue="reports", unique_key="report:8", unique_expires_at=now - timedelta(1))

    assert listed(changelist(admin_client, status="done")) == {done.jid}
    assert listed(changelist(admin_client, queue="reports")) == {dead.jid, locked.jid, stale.jid}
    assert listed(changelist(admin_client, job_type="maint.secret")) == {dead.jid}
    assert listed(changelist(admin_client, unique_held="yes")) == {locked.jid}
    assert listed(changelist(admin_client, unique_held="no")) == {done.jid, dead.jid, stale.jid}


def test_changelist__filter_choices_come_from_registry_and_latest_jobs(
    admin_client: Client,
) -> None:
    make_job(queue="adhoc", job_type="gone.type")

    response = changelist(admin_client)

    choices = {
        spec.parameter_name: {value for value, _label in spec.lookup_choices}
        for spec in response.context["cl"].filter_specs
        if hasattr(spec, "lookup_choices") and hasattr(spec, "parameter_name")
    }
    # Seen in the latest jobs, declared by @job (tests.testapp.jobtypes.maintenance),
    # and the default queue.
    assert {"adhoc", "vault", "default"} <= choices["queue"]
    assert {"gone.type", "maint.secret", "maint.noop"} <= choices["job_type"]
    assert choices["unique_held"] == {"yes", "no"}


def test_changelist__search_exact_jid_or_job_id(admin_client: Client) -> None:
    a = make_job(job_id="invoice:42")
    b = make_job()
    make_job(job_id="invoice:420")

    assert listed(changelist(admin_client, q=b.jid)) == {b.jid}
    assert listed(changelist(admin_client, q="invoice:42")) == {a.jid}
    assert listed(changelist(admin_client, q=b.jid[:8])) == set()
    # A job id that looks like a jid is still found as a job id.
    hexy = make_job(job_id="0123456789abcdef0123456789abcdef")
    assert listed(changelist(admin_client, q=hexy.job_id)) == {hexy.jid}


def test_changelist__changelist_does_not_load_payloads(admin_client: Client) -> None:
    make_job(payload={"big": "x" * 1000})

    with CaptureQueriesContext(connection) as queries:
        changelist(admin_client)

    selects = [q["sql"] for q in queries.captured_queries if "django_jobqueue_job" in q["sql"]]
    listing = [sql for sql in selects if "ORDER BY" in sql.upper() and "COUNT(" not in sql.upper()]
    assert listing
    assert all('"payload"' not in sql and "`payload`" not in sql for sql in listing), listing


def test_no_add_page(admin_client: Client) -> None:
    response = admin_client.get(reverse("admin:django_jobqueue_job_add"))
    assert response.status_code == 403


# Paginator -------------------------------------------------------------------------


def test_paginator__capped_count() -> None:
    make_jobs(8)
    paginator = EstimatedCountPaginator(Job.objects.filter(queue="default").order_by("pk"), 2)
    paginator.count_limit = 5

    with CaptureQueriesContext(connection) as queries:
        assert paginator.count == 6

    [sql] = [q["sql"] for q in queries.captured_queries]
    assert "LIMIT 6" in sql.upper()


def test_paginator__exact_below_the_cap() -> None:
    make_jobs(4)
    assert EstimatedCountPaginator(Job.objects.order_by("-pk"), 2).count == 4


@pytest.mark.vendor("postgresql")
def test_paginator__unfiltered_uses_the_planner_estimate_on_postgresql() -> None:
    make_jobs(8)
    estimate = planner_rows(Job.objects.all())
    assert isinstance(estimate, int) and estimate >= 0
    paginator = EstimatedCountPaginator(Job.objects.order_by("-pk"), 2)
    paginator.count_limit = -1  # any estimate is "big"

    with CaptureQueriesContext(connection) as queries:
        count = paginator.count

    assert count == planner_rows(Job.objects.all())
    assert [q["sql"].split()[0].upper() for q in queries.captured_queries] == ["EXPLAIN"]


@pytest.mark.vendor("mysql", "sqlite")
def test_paginator__no_planner_estimate_elsewhere() -> None:
    assert planner_rows(Job.objects.all()) is None


# Detail ----------------------------------------------------------------------------


def test_detail__pretty_payload_result_message_and_tracebacks(admin_client: Client) -> None:
    job = make_job(
        status=JobStatus.MAX_RETRY,
        payload={"to": "a@example.com", "n": 2},
        result={"sent": True},
        message="ValueError: boom",
        errors=[
            {
                "attempt": 1,
                "at": "2030-01-01T00:00:00+00:00",
                "exception_class": "builtins.ValueError",
                "message": "ValueError: first",
                "traceback": "Traceback (most recent call last):\n  File 'x.py'\nValueError: first",
            },
            {
                "attempt": 2,
                "at": "2030-01-01T00:01:00+00:00",
                "exception_class": "builtins.ValueError",
                "message": "ValueError: boom",
                "traceback": "Traceback (most recent call last):\nValueError: boom",
            },
        ],
    )

    html = detail(admin_client, job)

    assert "&quot;to&quot;: &quot;a@example.com&quot;" in html  # indented JSON, escaped
    assert "&quot;sent&quot;: true" in html
    assert "ValueError: boom" in html
    assert "Attempt 1" in html and "Attempt 2" in html
    assert "File &#x27;x.py&#x27;" in html
    assert 'name="_save"' not in html  # read-only


def test_detail__secure_job_never_shows_payload_or_result(admin_client: Client) -> None:
    job = make_job(
        job_type="maint.secret",
        secure=True,
        payload={"card": "4111-1111-1111-1111"},
        result={"token": "tok_live_secret"},
        rerun=True,
        rerun_payload={"card": "5500-0000-0000-0004"},
    )

    html = detail(admin_client, job)

    assert "4111-1111-1111-1111" not in html
    assert "tok_live_secret" not in html
    assert "5500-0000-0000-0004" not in html
    assert "secure job type: not shown" in html


def test_detail__stored_html_is_escaped(admin_client: Client) -> None:
    job = make_job(
        queue=XSS,
        payload={"name": XSS},
        result=XSS,
        message=XSS,
        job_id=XSS,
        unique_key=XSS,
        unique_expires_at=timezone.now() + timedelta(hours=1),
        errors=[{"attempt": 1, "message": XSS, "traceback": XSS, "exception_class": XSS}],
    )

    html = detail(admin_client, job)

    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(" in html


def test_changelist__stored_html_is_escaped(admin_client: Client) -> None:
    make_job(queue=XSS, job_type=XSS)

    html = changelist(admin_client).content.decode()

    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(" in html


def test_detail__unique_key_and_id_holds(admin_client: Client) -> None:
    until = timezone.now() + timedelta(hours=1)
    held = make_job(
        job_id="draft:1",
        unique_key="report:team-7",
        unique_mode="until_executed",
        unique_expires_at=until,
    )
    freed = make_job(
        job_id="draft:2",
        job_id_hash=None,
        unique_key="report:team-8",
        unique_key_hash=None,
        unique_expires_at=until,
    )

    html = detail(admin_client, held)
    assert "report:team-7" in html
    assert "until executed" in html.lower()
    assert icon(html, "id_held") == icon(html, "unique_key_held") == "True"
    html = detail(admin_client, freed)
    assert "report:team-8" in html
    assert icon(html, "id_held") == icon(html, "unique_key_held") == "False"


# Times -----------------------------------------------------------------------------


def test_when__to_the_second_in_the_current_time_zone_with_its_age() -> None:
    at = datetime(2030, 1, 1, 8, 0, 33, 250_000, tzinfo=UTC)

    with timezone.override("Asia/Kolkata"):  # UTC+05:30
        html = when(at)
        stacked = when(at, stacked=True)

    assert 'datetime="2030-01-01T13:30:33.250+05:30"' in html
    # ISO order to the second, the zone's name, then the age: as the console shows it.
    assert ">2030-01-01 13:30:33 IST, in 3\xa0years</time>" in html
    assert stacked.index("in ") < stacked.index("2030-01-01 13:30:33 IST")
    assert when(None) == "-"


@pytest.mark.parametrize(
    ("offset", "age"),
    [
        (timedelta(seconds=3), "3 s ago"),
        (timedelta(seconds=0), "0 s ago"),
        (timedelta(seconds=-5.5), "in 5 s"),
        (timedelta(minutes=2, seconds=10), "2\xa0minutes ago"),
        (timedelta(hours=-3, seconds=-30), "in 3\xa0hours"),
        (timedelta(days=9), "1\xa0week ago"),
    ],
)
def test_when__relative_age(offset: timedelta, age: str) -> None:
    # Well under a second passes between timezone.now() here and in when(); ages
    # are truncated toward zero, so a future time gets half a second of margin.
    html = when(timezone.now() - offset)

    assert f", {age}</time>" in html


def test_detail__times_to_the_second_with_their_age(admin_client: Client) -> None:
    now = timezone.now().replace(microsecond=0)
    job = running()
    Job.objects.filter(pk=job.pk).update(
        started_at=now - timedelta(seconds=42), heartbeat_at=now - timedelta(seconds=7)
    )
    job.refresh_from_db()

    before = timezone.now()
    html = detail(admin_client, job)
    after = timezone.now()

    def ages(value: datetime) -> range:
        """The whole seconds (truncated, as rendered) from ``value`` to the render."""
        low, high = ((moment - value).total_seconds() for moment in (before, after))
        return range(int(low), int(high) + 1)

    # The ages are those of the moment the page rendered, however long a loaded
    # machine took over it: 42 and 7 s, or a little more.
    started = html.split("field-started_at_display", 1)[1].split("field-", 1)[0]
    stamp = timezone.localtime(job.started_at).strftime("%Y-%m-%d %H:%M:%S UTC, ")
    assert f">{stamp}" in started
    assert min(ages(job.started_at)) >= 42
    assert any(f"{n} s ago" in started for n in ages(job.started_at)), started
    heartbeat = html.split("field-heartbeat_at_display", 1)[1].split("field-", 1)[0]
    assert min(ages(job.heartbeat_at)) >= 7
    assert any(f"{n} s ago" in heartbeat for n in ages(job.heartbeat_at)), heartbeat
    lease = html.split("field-lease_expires_at_display", 1)[1].split("field-", 1)[0]
    assert max(ages(job.lease_expires_at)) < 0  # the 60 s lease is still to come
    assert any(
        ("in 1\xa0minute</time>" if n <= -60 else f"in {-n} s</time>") in lease
        for n in ages(job.lease_expires_at)
    ), lease


def test_changelist__run_at_to_the_second_with_its_age(admin_client: Client) -> None:
    job = make_job(run_at=timezone.now() + timedelta(hours=2, seconds=30))

    html = changelist(admin_client).content.decode()

    stamp = timezone.localtime(job.run_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    cell = html.split("field-run_at_list", 1)[1].split("</td>", 1)[0]
    assert "in 2\xa0hours<br>" in cell
    assert f'<span class="jq-stamp">{stamp}</span>' in cell
    assert f'title="{job.jid}">{job.jid[:8]}…' in html


# Sections of a job's page ----------------------------------------------------------


def sections(client: Client, job: Job) -> dict[str | None, list[Any]]:
    """Return {section title: its fields} of ``job``'s page, in page order."""
    response = client.get(reverse("admin:django_jobqueue_job_change", args=[job.pk]))
    assert response.status_code == 200
    return {
        None if fieldset.name is None else str(fieldset.name): list(fieldset.fields)
        for fieldset in response.context["adminform"]
    }


def test_detail__a_plain_waiting_job_shows_no_id_unique_lease_or_errors(
    admin_client: Client,
) -> None:
    job = make_job()

    shown = sections(admin_client, job)
    html = detail(admin_client, job)

    assert list(shown) == [None, "Times", "Payload and result"]
    assert "created_at_display" in str(shown["Times"])
    assert "started_at_display" not in str(shown["Times"])  # not started yet
    assert "finished_at_display" not in str(shown["Times"])
    for label in ("Id held until", "Unique key", "Lease owner", "Failed attempts"):
        assert label not in html


def test_detail__sections_per_kind_of_job(admin_client: Client) -> None:
    with_id = make_job(job_id="invoice:42", id_held_until=timezone.now() + timedelta(hours=1))
    with_key = make_job(unique_key="report:7", unique_expires_at=timezone.now() + timedelta(1))
    leased = running()
    dead = make_job(
        status=JobStatus.MAX_RETRY,
        errors=[{"attempt": 1, "at": "2030-01-01T08:00:33+00:00", "message": "boom"}],
    )

    shown = sections(admin_client, with_id)
    assert list(shown) == [None, "Times", "Payload and result", "Id"]
    assert "id_held_until_display" in str(shown["Id"])
    assert "rerun_display" not in str(shown["Id"])  # no next run asked for
    assert list(sections(admin_client, with_key)) == [
        None,
        "Times",
        "Payload and result",
        "Unique key",
    ]
    assert list(sections(admin_client, leased)) == [None, "Times", "Payload and result", "Lease"]
    shown = sections(admin_client, dead)
    assert list(shown) == [None, "Times", "Payload and result", "Failed attempts"]
    assert "finished_at_display" in str(shown["Times"])
    assert ">2030-01-01 08:00:33 UTC, in " in detail(admin_client, dead)  # the attempt's time
