"""Flow-control limits (docs/limits.md) under bad input: every surface refuses a bad
limit with a typed error naming its field and writes nothing, and a job whose payload
gives an odd partition key is still claimed, under a documented key."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from django_jobqueue import enqueue_job, storage
from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.core.limitspec import parse_limit, parse_target
from django_jobqueue.models import AuditEntry, Job, JobStatus, LimitOverride, LimitState
from django_jobqueue.storage_limits import in_flight
from django_jobqueue.store import limits
from tests.limits_helpers import _fresh_limits  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.django_db


def claim(count: int = 10) -> list[Job]:
    return storage.claim("default", owner="t", limit=count)


def test_claim__a_run_time_partition_takes_every_odd_payload_under_a_documented_key() -> None:
    payloads: list[Any] = [
        {"c": "x" * 500},  # longer than a key may be: cut to 200 characters
        {"c": {"nested": ["object"] * 100}},  # its JSON text, cut to 200 characters
        {"c": None},  # null: the key ""
        {},  # missing: the key ""
        {"c": 42},  # an integer: its decimal text
        [1, 2, 3],  # not an object: the key ""
        "text",
        None,
    ]
    jids = [enqueue_job("lim", "limits.run", payload)["jid"] for payload in payloads]
    spec = {"concurrency": 100, "partition": "payload.c"}
    limits.set_limit("default", "type:limits.run", spec)
    claimed = claim(20)
    assert sorted(job.jid for job in claimed) == sorted(jids)
    # Each job is in flight under its documented key: the counts find them there
    # (the nested object's key is its JSON text, cut, whose spacing is the
    # database's own).
    limit = parse_limit(spec)
    counted = {
        key: in_flight("default", "type:limits.run", limit, key) for key in ("x" * 200, "42", "")
    }
    assert counted == {"x" * 200: 1, "42": 1, "": 5}
    if connection.vendor != "sqlite":  # SQLite's keyed claim makes no state row
        keys = set(LimitState.objects.values_list("limit_key", flat=True))
        assert {"x" * 200, "42", ""} <= keys
        assert all(len(key) <= 200 for key in keys)
    for job in Job.objects.all():
        assert job.status == JobStatus.PROCESSING


def test_claim__a_long_payload_key_is_held_to_its_limit() -> None:
    for _ in range(3):
        enqueue_job("lim", "limits.run", {"c": "y" * 300})
    limits.set_limit("default", "type:limits.run", {"concurrency": 1, "partition": "payload.c"})
    assert len(claim(10)) == 1
    assert claim(10) == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"concurrency": 10**30}, "concurrency must be an integer from 1 to 1,000,000"),
        ({"rate": "1", "concurrency": 1}, "A rate must be"),
        ({"rate": "9" * 5000 + "/s"}, "A rate must be"),
        ({"rate": "10000001/s"}, "A rate must be"),
        ({"rate": "-1/m"}, "A rate must be"),
        ({"rate": "100/x"}, "A rate must be"),
        ({"rate": "\u0661\u0660/s"}, "A rate must be"),  # Arabic-Indic digits
        ({"rate": "1/s", "burst": 2**40}, "burst must be an integer from 1 to 1,000,000"),
        ({"concurrency": 1, "partition": "payload." + "a" * 300}, "partition"),
        ({"concurrency": 1, "partition": "payload.a\x00"}, "partition"),
    ],
)
def test_parse_limit__refuses_what_no_table_stores(raw: Any, message: str) -> None:
    with pytest.raises(InvalidOption, match=message) as caught:
        parse_limit(raw, allow_callable=False)
    assert caught.value.field in raw


@pytest.mark.parametrize(
    "target", ["type:a\x00b", "queue:" + "q" * 101, "type:" + "t" * 201, "queue:", "nosuch:x", "x"]
)
def test_parse_target__refuses_bad_targets(target: str) -> None:
    with pytest.raises(InvalidOption, match="target") as caught:
        parse_target(target)
    assert caught.value.field == "target"


def call(*args: str) -> str:
    out = StringIO()
    call_command("jobqueue", "limits", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ["set", "queue:sms", "--rate", "0/s"],
        ["set", "queue:sms", "--rate", "-1/m"],
        ["set", "queue:sms", "--rate", "100/x"],
        ["set", "queue:sms", "--rate", "9" * 5000 + "/s"],
        ["set", "queue:sms", "--concurrency", "99999999999999999999"],
        ["set", "queue:sms", "--burst", "5"],
        ["set", "queue:sms", "--concurrency", "1", "--partition", "payload"],
        ["set", "queue:sms", "--concurrency", "1", "--partition", "payload." + "a" * 300],
        ["set", "queue:sms", "--concurrency", "1", "--partition", "payload.a\x00"],
        ["set", "type:a\x00", "--concurrency", "1"],
        ["set", "type:" + "t" * 300, "--concurrency", "1"],
        ["set", "sms", "--concurrency", "1"],
        ["clear", "sms"],
    ],
)
def test_command__bad_input_is_one_line_and_writes_nothing(args: list[str]) -> None:
    with pytest.raises(CommandError) as caught:
        call(*args)
    assert "\n" not in str(caught.value)
    assert not LimitOverride.objects.exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"target": "queue:sms", "concurrency": "99999999999999999999"}, "concurrency"),
        ({"target": "queue:sms", "burst": "2", "rate": "9" * 5000 + "/s"}, "rate"),
        (
            {"target": "queue:sms", "concurrency": "1", "partition": "payload." + "a" * 300},
            "partition",
        ),
        ({"target": "type:a\x00", "concurrency": "1"}, "target"),
        ({"target": "type:" + "t" * 300, "concurrency": "1"}, "target"),
    ],
)
def test_console__a_bad_limit_is_a_message_never_a_500(form: dict[str, str], field: str) -> None:
    from django.contrib.auth.models import Permission, User
    from django.test import Client
    from django.urls import reverse

    user = User.objects.create_user("ops", password="pw", is_staff=True)  # noqa: S106
    user.user_permissions.add(Permission.objects.get(codename="pause_queue"))
    client = Client()
    client.force_login(user)
    response = client.post(reverse("django_jobqueue_console:limit_set"), form, follow=True)
    # Django itself answers 400 to a NUL in a form field; the rest is the form's message.
    assert response.status_code in (200, 400)
    assert not AuditEntry.objects.exists()
    if response.status_code == 200:
        assert "A limit&#x27;s " + field in response.content.decode() or "A rate must" in (
            response.content.decode()
        )
    assert not LimitOverride.objects.exists()


@pytest.mark.parametrize(
    "setting",
    [
        {"QUEUES": {"sms": {"limits": {"concurrency": 0}}}},
        {"QUEUES": {"sms": {"limits": "10/s"}}},
        {"QUEUES": {"sms": {"limits": {"rate": "10/s", "partition": len}}}},
        {"JOB_TYPES": {"a.b": {"handler": "x.y", "limits": {"burst": 3}}}},
        {"JOB_TYPES": {"a.b": {"handler": "x.y", "limits": {"concurrency": 10**12}}}},
    ],
)
def test_check__a_bad_declared_limit_is_e001_with_the_limits_hint(setting: Any) -> None:
    from django.test import override_settings

    from django_jobqueue.checks import check_settings

    with override_settings(JOBQUEUE=setting):
        (error,) = check_settings()
    assert error.id == "django_jobqueue.E001"
    assert "['limits']" in error.msg
    assert "docs/limits.md" in (error.hint or "")


@pytest.mark.parametrize("key", ["", "k" * 201, "a\x00b", 42, ["k"], b"k"])
def test_enqueue__a_bad_limit_key_is_refused_and_writes_nothing(key: Any) -> None:
    with pytest.raises(InvalidOption, match="limit_key must be a string of 1 to 200"):
        enqueue_job("lim", "limits.run", {}, limit_key=key)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "row",
    [
        {"target": "garbage", "concurrency": 1},
        {"target": "nosuch:x", "concurrency": 1},
        {"target": "type:limits.run", "concurrency": 0},
        {"target": "type:limits.run", "rate": "fast"},
        {"target": "type:limits.run", "concurrency": 5_000_000},  # over the bound
        {"target": "type:limits.run", "concurrency": 1, "partition": "customer"},
    ],
)
def test_override__a_row_written_by_hand_is_ignored_and_shown_never_a_crash(
    row: dict[str, Any],
) -> None:
    LimitOverride.objects.create(**row)
    (jid,) = [enqueue_job("lim", "limits.run", {"customer": "a"})["jid"]]
    assert not limits.active("default", max_age_s=0)  # ignored, said in the log
    assert [job.jid for job in claim()] == [jid]
    (shown,) = limits.limit_rows("default")
    assert shown["target"] == row["target"]
    assert "invalid" in shown["override"]
    assert shown["effective"] == {}
    assert "ignored: invalid=" in call("list")
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(User.objects.create_user("v", is_staff=True))
    page = client.get(reverse("django_jobqueue_console:limits"))
    assert page.status_code == 200
    assert "ignored:" in page.content.decode()


def test_enqueue__a_declared_partition_takes_every_odd_payload_under_a_documented_key() -> None:
    from django.test import override_settings

    from django_jobqueue import enqueue_many

    declared = {"QUEUES": {"lim": {"limits": {"concurrency": 1, "partition": "payload.c"}}}}
    payloads: list[Any] = [
        {"c": "x" * 500},
        {"c": {"b": [1, 2], "a": None}},
        {"c": 1.5},
        {"c": True},
        {"c": None},
        {},
        [1, 2],
        "text",
    ]
    with override_settings(JOBQUEUE=declared):
        limits.clear_cache()
        (one,) = [enqueue_job("lim", "limits.run", {"c": ["list"]})["jid"]]
        enqueue_many([{"queue": "lim", "job_type": "limits.run", "payload": p} for p in payloads])
        keys = dict(Job.objects.values_list("jid", "limit_key"))
        assert keys[one] == '["list"]'
        assert sorted(keys.values()) == sorted(
            ['["list"]', "x" * 200, '{"b":[1,2],"a":null}', "1.5", "true", "", "", "", ""]
        )
        # One job per key at a time: the five keys, "" once.
        assert len(claim(20)) == 6
        assert claim(20) == []


def test_command__a_limit_on_an_unregistered_type_is_set_with_a_note() -> None:
    err = StringIO()
    out = StringIO()
    call_command(
        "jobqueue", "limits", "set", "type:nosuch", "--concurrency", "1", stdout=out, stderr=err
    )
    assert "Limit of type:nosuch set" in out.getvalue()
    assert "no job type 'nosuch' is registered" in err.getvalue()
    assert LimitOverride.objects.get().target == "type:nosuch"
    err = StringIO()
    call_command("jobqueue", "limits", "set", "type:limits.run", "--concurrency", "1", stderr=err)
    assert err.getvalue() == ""


@pytest.mark.parametrize("value", ["z" * 300, {"b": 1, "a": [2, 3]}])
def test_console__a_waiting_jobs_page_names_the_claims_key_for_any_field(value: Any) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    held, waiting = (enqueue_job("lim", "limits.run", {"c": value})["jid"] for _ in range(2))
    limits.set_limit("default", "type:limits.run", {"concurrency": 1, "partition": "payload.c"})
    assert [job.jid for job in claim()] == [held]
    client = Client()
    client.force_login(User.objects.create_user("v", is_staff=True))
    page = client.get(reverse("django_jobqueue_console:job", args=[waiting])).content.decode()
    assert "Throttled by limit type:limits.run, key" in page
    assert "1 of 1 in flight" in page
