"""One clock, one precision: every time the package writes and
compares is in one form, to the microsecond, on every database (django_jobqueue.core.dbclock).

No test waits for the clock: "due", "expired" and "held" are asked right after the
write, and times that must not have come yet are an hour away.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import DateTimeField, Value
from django.utils import timezone

from django_jobqueue import enqueue_job, reaping, storage
from django_jobqueue.core.dbclock import Now
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.schedules import materialize_due
from tests.testapp.jobtypes.ids import draft

USING = "default"
QUEUE = "ids"
PAIRS = 1000
#: Django's SQLite text form of a datetime: str() of it, no fraction at microsecond 0.
STORED_FORM = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})?")

sqlite_only = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="the text form of datetimes is SQLite's"
)


def claim(queue: str = QUEUE) -> list[Job]:
    return storage.claim(USING, owner="test", limit=1, queues=[queue])


def db_now(job: Job) -> datetime:
    """The database clock, read in a query on ``job``'s row, as an aware datetime."""
    return Job.objects.filter(pk=job.pk).values_list(Now(), flat=True)[0]


def sqlite_text(expression) -> str:
    """The raw text SQLite computes for ``expression`` (no converter parses it)."""
    query = Job.objects.none().query
    compiler = query.get_compiler(using=USING)
    sql, params = compiler.compile(expression.resolve_expression(query))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        (text,) = cursor.fetchone()
    return text


# -- a job enqueued is due to the next claim ---------------------------------------


@pytest.mark.django_db
def test_every_job_enqueued_is_claimed_by_the_next_claim():
    missed = []
    for n in range(PAIRS):
        jid = enqueue_job(QUEUE, "ids.draft", n).jid
        if [job.jid for job in claim()] != [jid]:
            missed.append((n, Job.objects.get(jid=jid).run_at))
    assert missed == []


@pytest.mark.django_db
def test_every_job_added_with_an_id_is_claimed_by_the_next_claim():
    missed = []
    for n in range(PAIRS // 5):
        assert draft.add(n, id=f"clock-{n}") is True
        if len(claim()) != 1:
            missed.append(n)
    assert missed == []


@pytest.mark.django_db
def test_a_job_at_the_python_clocks_now_is_due_at_once():
    # Written by Python (adapt_datetimefield_value), compared with the database clock.
    jid = enqueue_job(QUEUE, "ids.draft", "p", at=timezone.now()).jid
    assert [job.jid for job in claim()] == [jid]


@pytest.mark.django_db
def test_a_whole_second_compares_by_time_both_ways():
    # On SQLite a microsecond-0 datetime is stored without its fraction ("...:33"):
    # the start of the database clock's current second is due, the same form an
    # hour ahead is not.
    probe = enqueue_job(QUEUE, "ids.draft", "probe", delay="1h").jid
    second = db_now(Job.objects.get(jid=probe)).replace(microsecond=0)
    later = (second + timedelta(hours=1)).replace(microsecond=0)
    due = enqueue_job(QUEUE, "ids.draft", "due", at=second).jid
    enqueue_job(QUEUE, "ids.draft", "later", at=later)
    assert [job.jid for job in claim()] == [due]
    assert claim() == []
    assert Job.objects.get(jid=due).run_at == second


@pytest.mark.django_db
def test_each_statement_reads_a_fresh_clock_no_older_than_python_before_it():
    probe = Job.objects.get(jid=enqueue_job(QUEUE, "ids.draft", "probe", delay="1h").jid)
    behind = []
    for _ in range(PAIRS // 5):
        before = timezone.now()
        read = db_now(probe)
        if read < before:
            behind.append((before, read))
    assert behind == []


@pytest.mark.django_db
def test_the_times_one_statement_writes_are_one_instant():
    result = enqueue_job(QUEUE, "ids.draft", "x", expires_ms=60_000)
    row = Job.objects.get(jid=result.jid)
    assert row.created_at == row.updated_at == row.run_at
    assert row.expires_at - row.created_at == timedelta(minutes=1)
    (job,) = claim()
    job.refresh_from_db()
    assert job.started_at == job.heartbeat_at == job.updated_at
    assert job.lease_expires_at > job.started_at


# -- leases, id holds, unique keys and schedules end on time ------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("until", ["now", "past", "whole_second"])
def test_a_lease_that_ends_now_or_before_is_expired_at_once(until):
    enqueue_job(QUEUE, "ids.draft", "x")
    (job,) = claim()
    deadline = {
        "now": Now() + timedelta(0),
        "past": Now() - timedelta(microseconds=1),
        "whole_second": db_now(job).replace(microsecond=0),
    }[until]
    Job.objects.filter(pk=job.pk).update(lease_expires_at=deadline)
    assert list(Job.objects.lease_expired().values_list("pk", flat=True)) == [job.pk]
    assert reaping.reap_expired(USING) == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.MAX_RETRY  # max_retry=0


@pytest.mark.django_db
def test_a_lease_an_hour_ahead_is_not_expired():
    enqueue_job(QUEUE, "ids.draft", "x")
    (job,) = claim()
    assert not Job.objects.lease_expired().exists()
    assert reaping.reap_expired(USING) == 0
    assert Job.objects.get(pk=job.pk).lease_expires_at > db_now(job)


@pytest.mark.django_db
@pytest.mark.parametrize("until", ["now", "past", "whole_second"])
def test_an_id_hold_that_ends_now_or_before_frees_the_id_at_once(until):
    assert draft.add("first", id="clock-id") is True
    (job,) = claim()
    assert storage.complete(job, "ok") is True
    assert draft.add("held", id="clock-id") is False  # dedupe="1h" keeps it
    held_until = {
        "now": Now(),
        "past": Now() - timedelta(microseconds=1),
        "whole_second": db_now(job).replace(microsecond=0),
    }[until]
    Job.objects.filter(pk=job.pk).update(id_held_until=held_until)
    assert draft.add("again", id="clock-id") is True


@pytest.mark.django_db
@pytest.mark.parametrize("until", ["now", "past", "whole_second"])
def test_a_unique_key_that_expires_now_or_before_is_free_at_once(until):
    first = enqueue_job("unique", "unique.opt", None, unique_key="clock-key")
    assert enqueue_job("unique", "unique.opt", None, unique_key="clock-key").jid == first.jid
    row = Job.objects.get(jid=first.jid)
    expires = {
        "now": Now(),
        "past": Now() - timedelta(microseconds=1),
        "whole_second": db_now(row).replace(microsecond=0),
    }[until]
    Job.objects.filter(pk=row.pk).update(unique_expires_at=expires)
    again = enqueue_job("unique", "unique.opt", None, unique_key="clock-key")
    assert (again.status, again.jid != first.jid) == ("enqueued", True)


@pytest.mark.django_db
def test_a_one_off_schedule_at_the_python_clocks_now_is_due_at_once():
    draft.schedule("planned", at=timezone.now(), name="clock-plan")
    assert materialize_due(USING) == 1
    assert Job.objects.filter(payload="planned").count() == 1


# -- SQLite: one text form ----------------------------------------------------------


@sqlite_only
@pytest.mark.django_db
def test_sqlite_now_is_djangos_stored_text_to_the_microsecond():
    for expression in (Now(), Now() + timedelta(0), Now() - timedelta(hours=1)):
        text = sqlite_text(expression)
        assert STORED_FORM.fullmatch(text), text
        moment = datetime.fromisoformat(text).replace(tzinfo=UTC)
        assert connection.ops.adapt_datetimefield_value(moment) == text


@sqlite_only
@pytest.mark.django_db
def test_sqlite_duration_sums_keep_the_stored_text():
    # django_format_dtdelta returns str(datetime): a sum that lands on a whole
    # second has no fraction, exactly as Django stores that datetime.
    half = datetime(2026, 12, 1, 8, 0, 33, 500000, tzinfo=UTC)
    cases = {
        timedelta(microseconds=500000): "2026-12-01 08:00:34",
        timedelta(microseconds=1): "2026-12-01 08:00:33.500001",
        timedelta(0): "2026-12-01 08:00:33.500000",
    }
    for delta, expected in cases.items():
        assert sqlite_text(Value(half, output_field=DateTimeField()) + delta) == expected
        assert connection.ops.adapt_datetimefield_value(half + delta) == expected


@sqlite_only
@pytest.mark.django_db
def test_sqlite_text_order_is_time_order_at_whole_seconds():
    base = datetime(2026, 12, 1, 8, 0, 33, tzinfo=UTC)
    moments = [
        base - timedelta(microseconds=1),
        base,
        base + timedelta(microseconds=1),
        base + timedelta(microseconds=999999),
        base + timedelta(seconds=1),
    ]
    texts = [connection.ops.adapt_datetimefield_value(m) for m in moments]
    assert texts[1] == "2026-12-01 08:00:33"  # no ".000000": what SQLite holds
    with connection.cursor() as cursor:
        for a, ta in zip(moments, texts, strict=True):
            for b, tb in zip(moments, texts, strict=True):
                cursor.execute("SELECT %s < %s, %s <= %s", [ta, tb, ta, tb])
                assert cursor.fetchone() == (int(a < b), int(a <= b)), (ta, tb)
