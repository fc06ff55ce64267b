"""Jids: version-7 UUIDs as 32 hex digits, made in time order (store/rawinsert.py)."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from django_jobqueue import enqueue_job, enqueue_many
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job
from django_jobqueue.store.rawinsert import new_jids
from tests.no_duplicate_helpers import JOB_TYPE

JID = re.compile(r"[0-9a-f]{32}")


def _ms(jid: str) -> int:
    """The Unix time in ms a jid carries (its first 48 bits)."""
    return int(jid[:12], 16)


@pytest.mark.parametrize("count", [1, 2, 500])
def test_new_jids__version_7_uuids_of_now_as_32_hex_digits(count: int) -> None:
    before = time.time_ns() // 1_000_000
    jids = new_jids(count)
    after = time.time_ns() // 1_000_000
    assert len(jids) == len(set(jids)) == count
    for jid in jids:
        assert JID.fullmatch(jid), jid
        parsed = uuid.UUID(jid)
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert before <= _ms(jid) <= after


def test_new_jids__later_calls_sort_after_earlier_ones_and_none_repeat() -> None:
    seen: list[str] = []
    for _ in range(50):
        seen.extend(new_jids(3))
        time.sleep(0.002)
    assert len(set(seen)) == len(seen)
    stamps = [_ms(jid) for jid in seen]
    assert stamps == sorted(stamps)
    assert stamps[-1] > stamps[0]
    # Random below the stamp: 74 bits, not a counter someone could guess.
    assert len({jid[13:16] + jid[17:] for jid in seen}) == len(seen)


@pytest.mark.django_db(transaction=True)
def test_every_way_in__stores_a_version_7_jid_of_its_creation() -> None:
    before = time.time_ns() // 1_000_000
    jids = [enqueue_job("jids", JOB_TYPE, {"n": 1})["jid"]]
    jids += [r["jid"] for r in enqueue_many([{"queue": "jids", "job_type": JOB_TYPE}] * 3)]
    jids += [r["jid"] for r in enqueue_many([{"queue": "jids", "job_type": JOB_TYPE}] * 600)]
    jids.append(enqueue_job("jids", JOB_TYPE, {}, unique_key="k")["jid"])
    assert Queue("jids", job_type=JOB_TYPE).add({"n": 2}, id="a") is True
    after = time.time_ns() // 1_000_000
    stored = list(Job.objects.filter(queue="jids").values_list("jid", flat=True))
    assert set(jids) <= set(stored) and len(stored) == len(jids) + 1
    for jid in stored:
        parsed = uuid.UUID(jid)
        assert parsed.version == 7, jid
        assert before <= _ms(jid) <= after
