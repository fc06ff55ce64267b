"""The one-statement enqueue and the bulk enqueue.

The raw insert must write the row the ORM wrote, column for column, on every
database; a plain enqueue is one statement; a PostgreSQL wake-up rides the insert
and so follows the transaction; ``enqueue_many`` is all or nothing, deduplicates
ids and unique keys against the table and within the batch, and wakes each queue
once.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import enqueue_job, enqueue_many
from django_jobqueue.core.exceptions import (
    DuplicateJob,
    InvalidOption,
    InvalidPayload,
    UnknownJobType,
)
from django_jobqueue.enqueue import JobSpec, build_job
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job
from django_jobqueue.store import wakeups
from tests.no_duplicate_helpers import JOB_TYPE, race_threads
from tests.wakeup_helpers import wakeup_listener

pytestmark = pytest.mark.django_db(transaction=True)

_TIMES = ("created_at", "updated_at", "run_at", "expires_at", "unique_expires_at")


def _raw_row(jid):
    """The stored row as the driver returns it (JSON text on MariaDB and SQLite)."""
    columns = [f.column for f in Job._meta.concrete_fields]
    quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {quoted} FROM {table} WHERE jid = %s", [jid])  # noqa: S608
        return dict(zip(columns, cursor.fetchone(), strict=True))


def _orm_insert(spec):
    """The ORM path of an enqueue, kept here as the reference the raw insert must match."""
    jid = uuid.uuid4().hex
    Job(**spec.model_fields(jid)).save(force_insert=True, using=spec.using)
    return jid


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"delay": "5s", "expires_ms": 1500, "priority": 7, "max_retry": 0, "timeout_ms": 1234},
        {"unique_key": "k-é", "unique_ttl_ms": 60_000},
        {"at": "future"},
    ],
)
@pytest.mark.parametrize("payload", [None, {"a": [1, "é", None, True, 2.5]}, "text", [], 0])
def test_raw_insert__writes_the_row_the_orm_wrote(options, payload):
    if options.get("at") == "future":
        options = {"at": timezone.now().replace(microsecond=123456) + timedelta(hours=1)}
    spec = build_job("fast", JOB_TYPE, payload, **options)
    orm = _raw_row(_orm_insert(spec))
    if spec.unique_key is not None:  # free the key for the second insert
        Job.objects.update(unique_key_hash=None)
        orm["unique_key_hash"] = None
    raw = _raw_row(enqueue_job("fast", JOB_TYPE, payload, **options).jid)
    if spec.unique_key is not None:
        raw["unique_key_hash"] = None
    for row in (orm, raw):
        row.pop("id")
        row.pop("jid")
    orm_times = {name: orm.pop(name) for name in _TIMES}
    raw_times = {name: raw.pop(name) for name in _TIMES}
    assert raw == orm
    for times in (orm_times, raw_times):
        assert times["created_at"] == times["updated_at"]  # one instant per statement
    for name in ("run_at", "expires_at", "unique_expires_at"):
        assert (raw_times[name] is None) == (orm_times[name] is None)
        assert type(raw_times[name]) is type(orm_times[name])
    if "at" in options:
        assert raw_times["run_at"] == orm_times["run_at"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"delay": "5s", "expires_ms": 1500, "priority": 7, "max_retry": 0, "timeout_ms": 1234},
        {"unique_key": "k-é", "unique_ttl_ms": 60_000},
        {"at": "future"},
    ],
)
def test_bulk_insert__writes_the_row_the_orm_wrote_for_each_job(options):
    # Several rows: PostgreSQL binds a many-row insert as one array per column, a
    # path of its own; each of its rows must still be the ORM's row.
    if options.get("at") == "future":
        options = {"at": timezone.now().replace(microsecond=123456) + timedelta(hours=1)}
    payloads = [None, {"a": [1, "é", None, True, 2.5]}, "text", [], 0]
    orm = []
    for payload in payloads:
        spec = build_job("fast", JOB_TYPE, payload, **options)
        orm.append(_raw_row(_orm_insert(spec)))
        if spec.unique_key is not None:  # free the key for the next insert
            Job.objects.update(unique_key_hash=None)
    unique = options.get("unique_key")
    jobs = [
        {"queue": "fast", "job_type": JOB_TYPE, "payload": payload, **options}
        | ({"unique_key": f"{unique}-{n}"} if unique else {})
        for n, payload in enumerate(payloads)
    ]
    results = enqueue_many(jobs)
    raw = [_raw_row(r.jid) for r in results]
    for row in (*orm, *raw):
        row.pop("id")
        row.pop("jid")
        if unique:
            row.pop("unique_key")
            row["unique_key_hash"] = None
    for want, got in zip(orm, raw, strict=True):
        want_times = {name: want.pop(name) for name in _TIMES}
        got_times = {name: got.pop(name) for name in _TIMES}
        assert got == want
        assert got_times["created_at"] == got_times["updated_at"]
        for name in ("run_at", "expires_at", "unique_expires_at"):
            assert (got_times[name] is None) == (want_times[name] is None), name
            assert type(got_times[name]) is type(want_times[name])
        if "at" in options:
            assert got_times["run_at"] == want_times["run_at"]
        elif "delay" in options:
            assert got_times["run_at"] - got_times["created_at"] == timedelta(seconds=5)
            assert got_times["expires_at"] - got_times["created_at"] == timedelta(seconds=1.5)


@pytest.mark.parametrize("payload", [None, {"same": ["for", "all"]}, "mixed"])
def test_bulk_insert__a_batch_of_mixed_options__each_row_is_the_orms(payload):
    # PostgreSQL binds a column that is the same in every row once, and an array
    # otherwise; here each column is uniform in some batches and mixed in others.
    future = timezone.now().replace(microsecond=123456) + timedelta(hours=1)
    options = [
        {},
        {"delay": "5s", "expires_ms": 1500, "priority": 7, "max_retry": 0, "timeout_ms": 1234},
        {"unique_key": "mixed-k", "unique_ttl_ms": 60_000},
        {"at": future, "priority": 3},
        {"queue": "other"},
    ]
    payloads = [payload] * len(options) if payload != "mixed" else [None, {"a": 1}, "t", [], 0]
    orm = []
    for opts, body in zip(options, payloads, strict=True):
        opts = dict(opts)
        spec = build_job(opts.pop("queue", "fast"), JOB_TYPE, body, **opts)
        orm.append(_raw_row(_orm_insert(spec)))
        Job.objects.update(unique_key_hash=None)  # free the key for the batch
    jobs = [
        {"queue": "fast", "job_type": JOB_TYPE, "payload": body, **opts}
        for opts, body in zip(options, payloads, strict=True)
    ]
    raw = [_raw_row(r.jid) for r in enqueue_many(jobs)]
    for want, got, opts in zip(orm, raw, options, strict=True):
        for row in (want, got):
            row.pop("id")
            row.pop("jid")
            row["unique_key_hash"] = None
        want_times = {name: want.pop(name) for name in _TIMES}
        got_times = {name: got.pop(name) for name in _TIMES}
        assert got == want, opts
        for name in ("run_at", "expires_at", "unique_expires_at"):
            assert (got_times[name] is None) == (want_times[name] is None), (name, opts)
        if "at" in opts:
            assert got_times["run_at"] == want_times["run_at"]
        if "delay" in opts:
            assert got_times["run_at"] - got_times["created_at"] == timedelta(seconds=5)
    # A None payload is SQL NULL, not JSON null, as Django's JSONField stores it.
    nulls = Job.objects.filter(payload__isnull=True).count()
    assert nulls == 2 * payloads.count(None)


def test_bulk_insert__rows_take_ids_in_the_batch_order():
    # Equal priority and run_at: the claim's order is the id's, so a batch's jobs
    # run first in, first out.
    results = enqueue_many([{"job_type": JOB_TYPE, "payload": {"n": n}} for n in range(1_500)])
    by_id = list(Job.objects.order_by("id").values_list("jid", flat=True))
    assert by_id == [r.jid for r in results]


def _offsets(jid):
    job = Job.objects.get(jid=jid)
    return job.run_at - job.created_at, job.expires_at - job.created_at


def test_raw_insert__times_are_the_database_clock_plus_the_delay():
    jid = enqueue_job("fast", JOB_TYPE, delay="5s", expires_ms=1500).jid
    assert _offsets(jid) == (timedelta(seconds=5), timedelta(milliseconds=1500))
    job = Job.objects.get(jid=jid)
    assert job.waiting is True
    assert job.status == "init"
    assert job.errors == []


def test_build_job__its_spec_is_the_one_the_dataclass_makes():
    """build_job fills the frozen JobSpec at once (JobSpec.of): the same fields, the
    same equality and hash as one made by its __init__."""
    spec = build_job("fast", JOB_TYPE, "x", delay="2s", unique_key="k", limit_key="lk")
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(JobSpec)}
    made = JobSpec(**{f.name: fields[f.name] for f in dataclasses.fields(JobSpec) if f.init})
    for name in ("payload_json", "origin", "limit_key"):
        object.__setattr__(made, name, fields[name])
    assert vars(spec) == vars(made)
    assert (spec, hash(spec), repr(spec)) == (made, hash(made), repr(made))
    assert spec.origin.startswith("code:tests.test_enqueue_fast.")
    with pytest.raises(TypeError):
        JobSpec.of({k: v for k, v in fields.items() if k != "origin"})


def test_plain_enqueue__is_one_statement_in_autocommit(django_assert_num_queries):
    with django_assert_num_queries(1):
        enqueue_job("fast", JOB_TYPE, {"n": 1})
    with django_assert_num_queries(1):
        enqueue_job("fast", JOB_TYPE, {"n": 2}, delay="1s")


def test_plain_enqueue__is_one_statement_in_the_callers_transaction():
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        for n in range(3):
            enqueue_job("fast", JOB_TYPE, {"n": n})
    assert len([q for q in queries.captured_queries if "INSERT" in q["sql"]]) == 3
    assert len(queries.captured_queries) == 3
    assert Job.objects.count() == 3


@pytest.mark.vendor("postgresql")
def test_unique_key_enqueue__is_one_statement_on_postgresql(django_assert_num_queries):
    with django_assert_num_queries(1):
        first = enqueue_job("fast", JOB_TYPE, unique_key="one")
    with django_assert_num_queries(1):
        again = enqueue_job("fast", JOB_TYPE, unique_key="one")
    assert again.deduplicated
    assert again.jid == first.jid
    with django_assert_num_queries(1):
        assert Queue("fast", job_type=JOB_TYPE).add(id="id-1") is True
    with django_assert_num_queries(1):
        assert Queue("fast", job_type=JOB_TYPE).add(id="id-1") is False
    with django_assert_num_queries(1), pytest.raises(DuplicateJob):
        Job.objects.create_job(build_job("fast", JOB_TYPE, job_id="id-1"))


@pytest.mark.vendor("postgresql")
def test_wake_up__rides_the_transaction__rollback_sends_none():
    with wakeup_listener() as received:
        wakeups.local_event.clear()
        with transaction.atomic():
            enqueue_job("fast-a", JOB_TYPE)
            enqueue_many([{"queue": "fast-b", "job_type": JOB_TYPE}])
            transaction.set_rollback(True)
        assert received() == []
        assert not wakeups.local_event.is_set()
        assert Job.objects.count() == 0
        with transaction.atomic():
            enqueue_job("fast-a", JOB_TYPE)
            assert not wakeups.local_event.is_set()  # on commit only
        assert wakeups.local_event.is_set()
        assert received() == ["fast-a"]
        enqueue_job("fast-a", JOB_TYPE, delay="1h")  # not due: no wake-up
        assert received() == []


def test_rollback_of_the_callers_transaction__leaves_no_job_and_no_local_wake_up():
    wakeups.local_event.clear()
    with transaction.atomic():
        enqueue_many([{"queue": "r", "job_type": JOB_TYPE, "unique_key": "k"}] * 3)
        enqueue_job("r", JOB_TYPE)
        transaction.set_rollback(True)
    assert Job.objects.count() == 0
    assert not wakeups.local_event.is_set()


# -- enqueue_many ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"job_type": "no.such.type"}, UnknownJobType),
        ({"job_type": JOB_TYPE, "payload": float("nan")}, InvalidPayload),
        ({"job_type": JOB_TYPE, "priority": 0}, InvalidOption),
        ({"job_type": JOB_TYPE, "colour": "red"}, InvalidOption),
    ],
)
def test_enqueue_many__one_invalid_job_writes_nothing_and_names_its_index(bad, error):
    jobs = [{"queue": "b", "job_type": JOB_TYPE, "payload": n} for n in range(5)]
    jobs.insert(3, bad)
    with pytest.raises(error, match=r"^jobs\[3\]: ") as info:
        enqueue_many(jobs)
    assert info.value.index == 3
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"payload": {"x": float("inf")}}, InvalidPayload),
        ({"payload": "nul \x00"}, InvalidPayload),
        ({"priority": True}, InvalidOption),  # equal to 1, but not an int
        ({"priority": 1.0}, InvalidOption),
        ({"delay": "-1s"}, InvalidOption),
    ],
)
def test_enqueue_many__a_job_like_the_ones_before_it_is_still_checked(bad, error):
    # Jobs with the same type, queue and options are validated once per batch; a
    # later job that differs in its payload, or in an option's type, is checked.
    same = {"queue": "q", "job_type": JOB_TYPE, "priority": 1, "delay": "1s"}
    jobs = [{**same, "payload": {"n": n}} for n in range(3)]
    jobs.append({**same, **bad})
    with pytest.raises(error) as raised:
        enqueue_many(jobs)
    assert raised.value.index == 3
    assert str(raised.value).startswith("jobs[3]: ")
    assert not Job.objects.exists()


def test_enqueue_many__a_batch_of_one_type_checks_every_payload_and_names_its_index():
    # The jobs after the second reuse the last template by identity (no hashing):
    # each payload is still checked, and the error names the job's index.
    from django_jobqueue.handle import JobHandle
    from django_jobqueue.store.registry import get_job_description

    payloads: list[object] = [{"n": n} for n in range(6)]
    payloads[4] = {"n": float("nan")}
    with pytest.raises(InvalidPayload, match=r"^jobs\[4\]: The payload of a ") as raised:
        JobHandle(get_job_description(JOB_TYPE)).enqueue_many(payloads)
    assert raised.value.index == 4
    assert not Job.objects.exists()


def test_enqueue_many__shared_options__each_job_its_own_payload_and_options():
    jobs = [
        {"queue": "q", "job_type": JOB_TYPE, "payload": {"n": 0}, "priority": 5},
        {"queue": "q", "job_type": JOB_TYPE, "payload": {"n": 1}, "priority": 5},
        {"queue": "q", "job_type": JOB_TYPE, "payload": None, "priority": 6},
        {"queue": "r", "job_type": JOB_TYPE, "payload": [2], "priority": 5},
        {"queue": "q", "job_type": JOB_TYPE, "payload": {"n": 4}, "priority": 5},
    ]
    results = enqueue_many(jobs)
    got = [Job.objects.values_list("queue", "payload", "priority").get(jid=r.jid) for r in results]
    assert got == [(j["queue"], j["payload"], j["priority"]) for j in jobs]


def test_enqueue_many__answers_each_job_in_order_and_dedupes_within_the_batch():
    results = enqueue_many(
        [
            {"queue": "b", "job_type": JOB_TYPE, "payload": 0},
            {"queue": "b", "job_type": JOB_TYPE, "payload": 1, "unique_key": "k"},
            {"queue": "b", "job_type": JOB_TYPE, "payload": 2, "unique_key": "k"},
            {"queue": "b", "job_type": JOB_TYPE, "payload": 3, "job_id": "i"},
            {"queue": "b", "job_type": JOB_TYPE, "payload": 4, "job_id": "i"},
            {"queue": "other", "job_type": JOB_TYPE, "payload": 5, "job_id": "i"},
        ]
    )
    statuses = [r.status for r in results]
    assert statuses == [
        "enqueued",
        "enqueued",
        "deduplicated",
        "enqueued",
        "deduplicated",
        "enqueued",
    ]
    assert results[2].jid == results[1].jid
    assert results[4].jid == results[3].jid
    stored = dict(Job.objects.values_list("jid", "payload"))
    assert stored == {results[i].jid: i for i in (0, 1, 3, 5)}


def test_enqueue_many__dedupes_against_the_table_and_clears_stale_holds():
    held = enqueue_job("t", JOB_TYPE, unique_key="live").jid
    stale = enqueue_job("t", JOB_TYPE, unique_key="stale").jid
    Job.objects.filter(jid=stale).update(unique_expires_at=timezone.now() - timedelta(seconds=1))
    assert Queue("t", job_type=JOB_TYPE).add(id="i") is True
    id_holder = Job.objects.get(job_id="i").jid
    results = enqueue_many(
        [
            {"queue": "t", "job_type": JOB_TYPE, "unique_key": "live"},
            {"queue": "t", "job_type": JOB_TYPE, "unique_key": "stale"},
            {"queue": "t", "job_type": JOB_TYPE, "job_id": "i"},
        ]
    )
    assert [(r.status, r.jid) for r in results[::2]] == [
        ("deduplicated", held),
        ("deduplicated", id_holder),
    ]
    assert results[1].status == "enqueued"
    assert Job.objects.get(jid=stale).unique_key_hash is None
    assert Job.objects.filter(unique_key="stale", unique_key_hash__isnull=False).get().jid == (
        results[1].jid
    )


def test_enqueue_many__many_rows_over_several_statements():
    results = enqueue_many(
        [{"queue": f"q{n % 3}", "job_type": JOB_TYPE, "payload": {"n": n}} for n in range(2_345)]
    )
    assert len({r.jid for r in results}) == 2_345
    assert Job.objects.count() == 2_345
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == list(range(2_345))


def test_enqueue_many__statements_and_one_wake_up_per_queue():
    jobs = [{"queue": f"w{n % 2}", "job_type": JOB_TYPE} for n in range(10)]
    with CaptureQueriesContext(connection) as queries:
        enqueue_many(jobs)
    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    assert len(inserts) == 1
    if connection.vendor == "postgresql":
        assert inserts[0].count("pg_notify") == 2
    assert Job.objects.count() == 10


@pytest.mark.vendor("postgresql")
def test_enqueue_many__sends_one_wake_up_per_queue():
    with wakeup_listener() as received:
        enqueue_many([{"queue": f"w{n % 3}", "job_type": JOB_TYPE} for n in range(30)])
        enqueue_many([{"queue": "later", "job_type": JOB_TYPE, "delay": "1h"}])
        assert sorted(received()) == ["w0", "w1", "w2"]


def test_job_handle_enqueue_many__and_async_twin():
    from django_jobqueue.handle import JobHandle
    from django_jobqueue.store.registry import get_job_description

    handle = JobHandle(get_job_description(JOB_TYPE))
    results = handle.enqueue_many([1, 2, 3], queue="h", priority=5)
    assert [r.status for r in results] == ["enqueued"] * 3
    assert set(Job.objects.values_list("queue", "priority")) == {("h", 5)}

    import asyncio

    more = asyncio.run(handle.aenqueue_many([4], queue="h"))
    assert more[0].status == "enqueued"
    assert Job.objects.count() == 4


@pytest.mark.vendor("postgresql", "mysql")
def test_two_bulk_calls_with_overlapping_unique_keys__one_row_per_key():
    keys = [f"k{n}" for n in range(200)]
    batches = [keys[:150], keys[50:]]  # 100 keys in both, in other orders
    batches[1].reverse()

    def racer(i):
        return enqueue_many(
            [{"queue": "race", "job_type": JOB_TYPE, "unique_key": k} for k in batches[i]]
        )

    for _round in range(3):
        race = race_threads(2, racer)
        assert not race.errors, race.errors
        stored = list(Job.objects.filter(queue="race").values_list("unique_key", "jid"))
        assert sorted(k for k, _ in stored) == sorted(keys)
        by_key = dict(stored)
        for batch, results in zip(batches, race.outcomes, strict=True):
            assert [r.jid for r in results] == [by_key[k] for k in batch]
        Job.objects.all().delete()


@pytest.mark.vendor("postgresql", "mysql")
def test_bulk_and_single_creators_race_on_ids__one_row_per_id():
    ids = [f"i{n}" for n in range(40)]

    def racer(i):
        if i == 0:
            return enqueue_many([{"queue": "race", "job_type": JOB_TYPE, "job_id": x} for x in ids])
        added = 0
        for x in reversed(ids):
            added += Queue("race", job_type=JOB_TYPE).add(id=x)
        return added

    race = race_threads(2, racer)
    assert not race.errors, race.errors
    assert sorted(Job.objects.values_list("job_id", flat=True)) == sorted(ids)
    enqueued = sum(r.status == "enqueued" for r in race.outcomes[0])
    assert enqueued + race.outcomes[1] == len(ids)


def test_local_event__set_after_commit_of_a_bulk():
    wakeups.local_event.clear()
    done = threading.Event()
    with transaction.atomic():
        enqueue_many([{"queue": "l", "job_type": JOB_TYPE}])
        done.set()
        assert not wakeups.local_event.is_set()
    assert wakeups.local_event.is_set()
