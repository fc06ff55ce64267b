"""Flow-control limits (docs/limits.md): declaration, run-time overrides, and the
claim's enforcement, on SQLite, PostgreSQL and MariaDB.

Claims here are made directly (``storage.claim``) so each assertion is about one
claim's decision; tests/worker/test_limits_race.py races real worker processes.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from django_jobqueue import storage
from django_jobqueue.core.exceptions import ImproperlyConfiguredJobQueue, InvalidOption
from django_jobqueue.core.limitspec import Limit, Rate, parse_limit, parse_rate
from django_jobqueue.models import Job, JobStatus, LimitOverride, LimitState
from django_jobqueue.reaping import reap_expired
from django_jobqueue.store import limits
from django_jobqueue.store.registry import describe
from tests.limits_helpers import _fresh_limits, enqueue  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.django_db


def claim(count: int = 10, **options: Any) -> list[Job]:
    return storage.claim("default", owner="t", limit=count, **options)


# The shape -------------------------------------------------------------------------


def test_parse_limit__reads_every_key() -> None:
    limit = parse_limit(
        {"concurrency": 2, "rate": "10/m", "burst": 3, "partition": "payload.c", "fair": True}
    )
    assert limit == Limit(
        concurrency=2, rate=Rate(10, 60), burst=3, partition="payload.c", fair=True
    )
    assert limit.bucket == 3
    assert parse_limit({"rate": "500/s"}).bucket == 500
    assert parse_limit({"rate": "100/m"}).bucket == 2  # one second's worth, rounded up
    assert parse_rate("1000/h").per_s == pytest.approx(1000 / 3600)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an integer from 1 to 1,000,000: got 0"),
        ({"concurrency": True}, "concurrency must be an integer from 1 to 1,000,000: got True"),
        ({"rate": "10/d"}, "A rate must be 'N/s', 'N/m' or 'N/h'"),
        ({"rate": "0/s"}, "A rate must be 'N/s', 'N/m' or 'N/h'"),
        ({"concurrency": 1, "burst": 2}, "burst needs a rate"),
        ({"concurrency": 1, "partition": "customer"}, "partition must be 'payload.<field>"),
        ({"concurrency": 1, "fair": True}, "fair needs a partition"),
        ({"partition": "key"}, "needs a concurrency or a rate"),
        ({"limit": 3}, "Unknown limit keys ['limit']"),
        ([("concurrency", 1)], "limits must be a dict"),
    ],
)
def test_parse_limit__refuses_bad_limits_by_name(raw: Any, message: str) -> None:
    with pytest.raises(InvalidOption, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_limit(raw)


def test_job_description__takes_limits_and_names_the_type_when_bad() -> None:
    desc = describe("x.y", lambda p, c: None, {"limits": {"concurrency": 3}})
    assert desc.limits == Limit(concurrency=3)
    with pytest.raises(ImproperlyConfiguredJobQueue, match="Job type 'x.y'.*concurrency"):
        describe("x.y", lambda p, c: None, {"limits": {"concurrency": -1}})


def test_settings__queue_and_job_type_limits_are_checked() -> None:
    from django_jobqueue.core.conf import validate_settings

    bad = {
        "QUEUES": {"sms": {"limits": {"rate": "fast"}}},
        "JOB_TYPES": {"a.b": {"handler": "x.y", "limits": {"concurrency": "2"}}},
    }
    with override_settings(JOBQUEUE=bad):
        problems = validate_settings()
    assert problems == [
        "JOBQUEUE['QUEUES']['sms']['limits']: A rate must be 'N/s', 'N/m' or 'N/h' with N an "
        "integer >= 1 (at most 1,000,000): got 'fast'.",
        "JOBQUEUE['JOB_TYPES']['a.b']['limits']: A limit's concurrency must be an integer "
        "from 1 to 1,000,000: got '2'.",
    ]


def test_runtime_override__wins_until_cleared() -> None:
    with override_settings(JOBQUEUE={"QUEUES": {"lim": {"limits": {"concurrency": 5}}}}):
        limits.clear_cache()
        assert limits.active("default").queues == {"lim": Limit(concurrency=5)}
        limits.set_limit("default", "queue:lim", {"concurrency": 1}, by="test")
        assert limits.active("default").queues == {"lim": Limit(concurrency=1)}
        limits.set_limit("default", "queue:lim", {})  # lifts the declared one
        assert not limits.active("default")
        assert limits.clear_limit("default", "queue:lim") is True
        assert limits.active("default").queues == {"lim": Limit(concurrency=5)}
    assert LimitOverride.objects.count() == 0


def test_set_limit__refuses_bad_targets_and_writes_nothing() -> None:
    with pytest.raises(InvalidOption, match="'type:<job type>' or 'queue:<queue>'"):
        limits.set_limit("default", "sms", {"concurrency": 1})
    with pytest.raises(InvalidOption, match="a callable is only taken by @job"):
        limits.set_limit("default", "type:a", {"concurrency": 1, "partition": len})
    assert LimitOverride.objects.count() == 0


# Enqueue: the partition key ----------------------------------------------------------


def test_enqueue__stores_the_explicit_limit_key_and_refuses_bad_ones() -> None:
    (jid,) = enqueue("c1", 1, limit_key="tenant-9")
    assert Job.objects.get(jid=jid).limit_key == "tenant-9"
    (plain,) = enqueue("c1", 1)
    assert Job.objects.get(jid=plain).limit_key == ""
    with pytest.raises(InvalidOption, match="limit_key must be a string of 1 to 200"):
        enqueue("c1", 1, limit_key="")
    with pytest.raises(InvalidOption, match="limit_key must be a string of 1 to 200"):
        enqueue("c1", 1, limit_key="k" * 201)
    assert Job.objects.count() == 2


def test_enqueue__stores_the_declared_partitions_key_one_per_payload_in_a_batch() -> None:
    from django_jobqueue import enqueue_many

    partitioned = {
        "QUEUES": {"lim": {"limits": {"concurrency": 1, "partition": "payload.customer"}}}
    }
    with override_settings(JOBQUEUE=partitioned):
        enqueue_many(
            [{"queue": "lim", "job_type": "limits.run", "payload": {"customer": c}} for c in "ab"]
            + [{"queue": "lim", "job_type": "limits.run", "payload": {"customer": 7}}]
        )
    assert sorted(Job.objects.values_list("limit_key", flat=True)) == ["7", "a", "b"]


# The claim ----------------------------------------------------------------------------


def test_claim__a_global_concurrency_takes_only_the_free_slots() -> None:
    enqueue("c", 5)
    limits.set_limit("default", "type:limits.run", {"concurrency": 2})
    first = claim(10)
    assert len(first) == 2
    assert claim(10) == []  # both slots held
    assert storage.complete(first[0])
    assert len(claim(10)) == 1  # the ended job's slot, once
    assert claim(10) == []


def test_claim__a_limited_type_does_not_block_other_types_of_its_queue() -> None:
    limited = enqueue("c", 4)
    free = enqueue("c", 3, "limits.free")
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    jobs = claim(10)
    assert sorted(j.jid for j in jobs) == sorted([limited[0], *free])


def test_claim__a_partitioned_concurrency_counts_per_key_in_claim_order() -> None:
    a = enqueue("a", 4)
    b = enqueue("b", 4)
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 2, "partition": "payload.customer"}
    )
    jobs = claim(10)
    assert [j.jid for j in jobs] == [a[0], a[1], b[0], b[1]]  # FIFO within each key
    assert claim(10) == []
    storage.fail(jobs[0], RuntimeError("x"), retryable=False)
    assert [j.jid for j in claim(10)] == [a[2]]


@pytest.mark.parametrize("partition", ["key", "payload.customer"])
def test_claim__keys_differing_by_case_or_a_trailing_space_are_distinct(partition: str) -> None:
    # MySQL and MariaDB compare these columns exactly too (migration 0026), as
    # PostgreSQL and SQLite do: three keys, a slot and a state row each.
    keys = ["Cust", "cust", "cust "]
    for key in keys:
        enqueue(key, 2, **({"limit_key": key} if partition == "key" else {}))
    limits.set_limit("default", "type:limits.run", {"concurrency": 1, "partition": partition})
    jobs = claim(10)
    assert sorted(j.payload["customer"] for j in jobs) == sorted(keys)
    assert claim(10) == []
    states = LimitState.objects.filter(target="type:limits.run")
    # SQLite's keyed claim needs no state row (its write transaction is the lock).
    made = [] if connection.vendor == "sqlite" else sorted(keys)
    assert sorted(states.values_list("limit_key", flat=True)) == made


def test_claim__a_partition_set_at_run_time_applies_to_jobs_already_waiting() -> None:
    enqueue("a", 3)
    enqueue("b", 3)  # no partition was declared: their limit_key is ""
    assert set(Job.objects.values_list("limit_key", flat=True)) == {""}
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 1, "partition": "payload.customer"}
    )
    jobs = claim(10)
    assert sorted(j.payload["customer"] for j in jobs) == ["a", "b"]


def test_claim__an_explicit_limit_key_wins_over_the_payload_field() -> None:
    enqueue("a", 2, limit_key="shared")
    enqueue("b", 2, limit_key="shared")
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 1, "partition": "payload.customer"}
    )
    assert len(claim(10)) == 1


def test_claim__a_queue_limit_and_a_type_limit_both_hold() -> None:
    enqueue("a", 3)
    enqueue("a", 3, "limits.free")
    limits.set_limit("default", "queue:lim", {"concurrency": 3})
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    jobs = claim(10)
    assert sorted(j.job_type for j in jobs) == ["limits.free", "limits.free", "limits.run"]


def test_claim__a_reaped_lease_frees_its_slot() -> None:
    enqueue("a", 2)
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    (held,) = claim(10, lease_ms=1)
    assert claim(10) == []
    Job.objects.filter(pk=held.pk).update(started_at=held.heartbeat_at)  # it had started
    import time

    time.sleep(0.05)
    assert reap_expired("default") == 1
    again = claim(10)
    assert len(again) == 1  # one slot, back once
    assert claim(10) == []


def test_claim__a_rate_allows_the_burst_then_one_start_per_token() -> None:
    enqueue("a", 10)
    limits.set_limit("default", "type:limits.run", {"rate": "1/h", "burst": 3})
    assert len(claim(10)) == 3
    assert claim(10) == []
    from django_jobqueue.storage_limits import throttled_ms

    wait = throttled_ms("default")
    assert wait is not None and 3_000_000 < wait <= 3_600_000  # about an hour for a token


def test_claim__a_retry_is_a_start_and_takes_a_token() -> None:
    enqueue("a", 3)
    limits.set_limit("default", "type:limits.run", {"rate": "1/h", "burst": 2})
    first, _second = claim(10)
    storage.fail(first, RuntimeError("again"))
    Job.objects.filter(pk=first.pk).update(run_at=first.heartbeat_at)  # due at once
    assert claim(10) == []  # the retry waits for a token like a first start


def test_claim__without_limits_keeps_its_one_statement(django_assert_num_queries: Any) -> None:
    enqueue("a", 3)
    limits.active("default")  # the cached view: read at most every half second
    from django_jobqueue.store.pauses import paused_queues

    paused_queues("default")
    statements = {"postgresql": 1, "mysql": 4, "sqlite": 1}
    from django.db import connection

    with django_assert_num_queries(statements[connection.vendor]):
        assert len(claim(10)) == 3
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() == 3


# manage.py jobqueue limits ------------------------------------------------------------


def call(*args: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("jobqueue", "limits", *args, stdout=out)
    return out.getvalue()


def test_command__set_list_clear_round_trip_with_audit() -> None:
    from django_jobqueue.models import AuditEntry

    assert call("list") == "No limits.\n"
    assert call(
        "set", "type:limits.run", "--concurrency", "2", "--partition", "payload.customer"
    ) == ('Limit of type:limits.run set: {"concurrency": 2, "partition": "payload.customer"}.\n')
    enqueue("a", 3)
    claim(10)
    assert call("list") == (
        "type:limits.run: concurrency=2 partition=payload.customer (set); "
        "in flight 2/2 per key, due 1\n"
        "  busiest keys (in flight): a=2\n"
    )
    import json

    (row,) = json.loads(call("list", "--json"))
    assert row["override"] == {"concurrency": 2, "partition": "payload.customer"}
    assert row["in_flight"] == 2
    assert call("clear", "type:limits.run") == "Run-time limit of type:limits.run cleared.\n"
    assert call("clear", "type:limits.run") == "type:limits.run had no run-time limit.\n"
    assert list(AuditEntry.objects.order_by("pk").values_list("action", "target")) == [
        ("limit_set", "type:limits.run"),
        ("limit_clear", "type:limits.run"),
        ("limit_clear", "type:limits.run"),
    ]


def test_command__bad_input_is_a_command_error_and_writes_nothing() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="A limit's target must be 'type:<job type>'"):
        call("set", "sms", "--concurrency", "1")
    with pytest.raises(CommandError, match="A rate must be 'N/s', 'N/m' or 'N/h'"):
        call("set", "queue:sms", "--rate", "5/day")
    with pytest.raises(CommandError, match="A limit's fair needs a partition"):
        call("set", "queue:sms", "--concurrency", "1", "--fair")
    assert LimitOverride.objects.count() == 0


# Fairness -------------------------------------------------------------------------------


@pytest.mark.parametrize("fair", [True, False])
def test_claim__fair_rotates_keys_so_a_small_tenant_waits_one_round(fair: bool) -> None:
    from django_jobqueue import enqueue_many

    enqueue_many([{"queue": "lim", "job_type": "limits.run", "payload": {"customer": "A"}}] * 5000)
    b_jids = {r["jid"] for r in enqueue_many(
        [{"queue": "lim", "job_type": "limits.run", "payload": {"customer": "B"}}] * 10
    )}  # fmt: skip
    limit = {"concurrency": 1000, "partition": "payload.customer"}
    limits.set_limit("default", "type:limits.run", {**limit, "fair": fair})
    started: list[str] = []
    while len(started) < 60:
        jobs = claim(10)
        started += [job.jid for job in jobs]
        storage.complete_many([(job, None) for job in jobs])
    a_before_last_b = (
        [jid for jid in started[: max(started.index(j) for j in b_jids) + 1] if jid not in b_jids]
        if b_jids <= set(started)
        else None
    )
    if fair:
        # B's ten jobs all started before A's next fifty did.
        assert a_before_last_b is not None and len(a_before_last_b) < 50
    else:
        assert not b_jids & set(started)  # claim order: behind A's 5,000


def test_command__a_run_time_partition_lists_the_claims_keys_per_key() -> None:
    # Set at run time, the partition is not stored on the jobs (limit_key ""): the
    # list reads each running job's key as the claim does, from the payload.
    call("set", "type:limits.run", "--concurrency", "1", "--partition", "payload.customer")
    enqueue("a", 2)
    enqueue("b", 2)
    assert len(claim(10)) == 2
    assert set(Job.objects.filter(status=JobStatus.PROCESSING).values_list("limit_key")) == {("",)}
    assert call("list") == (
        "type:limits.run: concurrency=1 partition=payload.customer (set); "
        "in flight 2/1 per key, due 2\n"
        "  busiest keys (in flight): a=1, b=1\n"
    )


# Visibility -----------------------------------------------------------------------------


def test_status_and_metrics__show_each_limits_use() -> None:
    import json
    from io import StringIO

    from django.core.management import call_command
    from prometheus_client import generate_latest
    from prometheus_client.core import CollectorRegistry

    from django_jobqueue.metrics import JobQueueCollector

    enqueue("a", 3)
    limits.set_limit("default", "type:limits.run", {"concurrency": 2, "rate": "120/m"})
    claim(10)
    out = StringIO()
    call_command("jobqueue", "status", stdout=out)
    assert (
        "Limits: 1\ntype:limits.run: concurrency=2 rate=120/m (set); in flight 2/2, due 1\n"
        in out.getvalue()
    )
    out = StringIO()
    call_command("jobqueue", "status", "--json", stdout=out)
    (row,) = json.loads(out.getvalue())["limits"]
    assert (row["target"], row["in_flight"], row["waiting"]) == ("type:limits.run", 2, 1)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobQueueCollector("default"))
    text = generate_latest(registry).decode()
    assert 'jobqueue_limit_in_flight{target="type:limits.run"} 2.0' in text
    assert 'jobqueue_limit_concurrency{target="type:limits.run"} 2.0' in text
    assert 'jobqueue_limit_rate_per_second{target="type:limits.run"} 2.0' in text
    assert 'jobqueue_limit_waiting{target="type:limits.run"} 1.0' in text


# Console --------------------------------------------------------------------------------


@pytest.fixture
def staff_client() -> Any:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    def make(*perms: str) -> Client:
        user = User.objects.create_user(f"u{len(perms)}", password="pw", is_staff=True)  # noqa: S106
        for codename in perms:
            user.user_permissions.add(Permission.objects.get(codename=codename))
        client = Client()
        client.force_login(user)
        return client

    return make


def test_console__limits_page_sets_and_clears_with_the_permission(staff_client: Any) -> None:
    from django.urls import reverse

    viewer = staff_client()
    page = viewer.get(reverse("django_jobqueue_console:limits"))
    assert page.status_code == 200 and b"No limits." in page.content
    refused = viewer.post(
        reverse("django_jobqueue_console:limit_set"), {"target": "queue:x", "concurrency": "1"}
    )
    assert refused.status_code == 403
    ops = staff_client("pause_queue")
    ops.post(
        reverse("django_jobqueue_console:limit_set"),
        {"target": "type:limits.run", "concurrency": "3", "partition": "payload.customer"},
    )
    assert LimitOverride.objects.get().concurrency == 3
    page = ops.get(reverse("django_jobqueue_console:limits")).content.decode()
    assert "concurrency 3, partition payload.customer" in page
    bad = ops.post(
        reverse("django_jobqueue_console:limit_set"),
        {"target": "type:limits.run", "rate": "3 per day"},
        follow=True,
    )
    assert "A rate must be" in bad.content.decode()
    assert LimitOverride.objects.get().rate == ""  # unchanged
    ops.post(reverse("django_jobqueue_console:limit_clear"), {"target": "type:limits.run"})
    assert not LimitOverride.objects.exists()


def test_console__a_waiting_jobs_page_says_why_it_is_not_running(staff_client: Any) -> None:
    from django.urls import reverse

    from django_jobqueue.store import pauses

    client = staff_client()
    held, waiting = enqueue("a", 2)
    (later,) = enqueue("a", 1, delay="1h")
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 1, "partition": "payload.customer"}
    )
    claim(10)

    def why(jid: str) -> str:
        return client.get(reverse("django_jobqueue_console:job", args=[jid])).content.decode()

    assert "Throttled by limit type:limits.run, key &#x27;a&#x27;: 1 of 1 in flight" in why(waiting)
    assert "Scheduled: its run_at" in why(later)
    assert "Why is this job not running?" not in why(held)  # it runs
    pauses.pause_queue("default", "lim")
    assert "Its queue lim is paused." in why(waiting)
    pauses.resume_queue("default", "lim")
    limits.clear_limit("default", "type:limits.run")
    assert "Due: waiting for a free worker." in why(waiting)


def test_command_prune__deletes_limit_rows_untouched_for_an_hour_only() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from django_jobqueue.models import LimitState

    LimitState.objects.create(
        target="type:a", limit_key="old", refilled_at=timezone.now() - timedelta(hours=2)
    )
    LimitState.objects.create(target="type:a", limit_key="new", refilled_at=timezone.now())
    LimitState.objects.create(target="type:a", limit_key="plain")  # concurrency only
    assert call("prune") == "Limit rows deleted: 2.\n"
    assert list(LimitState.objects.values_list("limit_key", flat=True)) == ["new"]


def test_claim__fills_with_other_types_when_a_limited_backlog_comes_first() -> None:
    limited = enqueue("c", 30)  # more than one round of candidates, all first in order
    free = enqueue("c", 3, "limits.free")
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    jobs = claim(10)
    assert sorted(j.jid for j in jobs) == sorted([limited[0], *free])
