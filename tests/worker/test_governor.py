"""Governor: adaptive idle sleep, spawn limits and per-type concurrency (no database)."""

from __future__ import annotations

import pytest

from django_jobqueue.worker.governor import Governor


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(**kwargs: object) -> Governor:
    options: dict = {"min_sleep_ms": 50, "max_sleep_ms": 400, "ramp_time_ms": 0}
    options.update(kwargs)
    return Governor(options.pop("max_workers", 4), **options)


def test_sleep__doubles_while_idle_up_to_max():
    gov = make()
    assert gov.sleep_ms == 50
    assert [gov.no_job() for _ in range(5)] == [100, 200, 400, 400, 400]


def test_sleep__snaps_back_to_min_when_a_job_is_found():
    gov = make()
    gov.no_job()
    gov.no_job()
    gov.found_job()
    assert gov.sleep_ms == 50
    gov.no_job()
    gov.woken()
    assert gov.sleep_ms == 50


def test_spawn__up_to_max_workers_while_there_is_demand():
    gov = make(max_workers=3)
    assert [gov.spawn() for _ in range(5)] == [True, True, True, False, False]
    assert gov.workers == 3


def test_spawn__first_worker_always_then_only_on_demand():
    gov = make(max_workers=3)
    assert gov.spawn()
    gov.no_job()
    assert not gov.spawn()
    gov.found_job()
    assert gov.spawn()
    assert gov.workers == 2


def test_spawn__ramp_time_spaces_spawns():
    clock = FakeClock()
    gov = make(max_workers=3, ramp_time_ms=100, clock=clock)
    assert gov.spawn()
    assert not gov.spawn()
    clock.now = 0.05
    assert not gov.spawn()
    clock.now = 0.1
    assert gov.spawn()
    assert gov.workers == 2


def test_retire__idle_workers_retire_but_the_last_keeps_polling():
    gov = make(max_workers=3)
    for _ in range(3):
        gov.spawn()
    assert [gov.retire() for _ in range(3)] == [True, True, False]
    assert gov.workers == 1
    gov.worker_exited()
    assert gov.workers == 0


def test_per_type_concurrency__types_at_their_limit_are_excluded():
    gov = make(concurrent={"mail": 2, "pdf": 1})
    assert gov.excluded_types() == []
    gov.add_job("mail")
    gov.add_job("pdf")
    assert gov.excluded_types() == ["pdf"]
    gov.add_job("mail")
    gov.add_job("other")
    assert gov.excluded_types() == ["mail", "pdf"]
    gov.del_job("mail")
    assert gov.excluded_types() == ["pdf"]
    assert gov.running("mail") == 1


def test_reserve__concurrent_claims_never_overshoot_a_limit():
    gov = make(concurrent={"pdf": 1, "mail": 2})
    first = gov.reserve()  # a claim in flight holds pdf's only place
    second = gov.reserve()
    assert first == frozenset()
    assert second == {"pdf"}
    gov.settle(first, "pdf")
    gov.settle(second, "mail")
    assert gov.running("pdf") == 1
    assert gov.running("mail") == 1
    assert gov.excluded_types() == ["pdf"]
    third = gov.reserve()
    assert third == {"pdf"}
    gov.settle(third, None)  # found nothing: the reservation is dropped
    gov.del_job("pdf")
    assert gov.excluded_types() == []


def test_reserve__threads_racing_claims_stay_within_the_limit():
    import threading

    gov = make(concurrent={"pdf": 3})
    peak = []
    barrier = threading.Barrier(16)

    def claim():
        barrier.wait()
        for _ in range(200):
            skipped = gov.reserve()
            claimed = None if "pdf" in skipped else "pdf"
            gov.settle(skipped, claimed)
            peak.append(gov.running("pdf"))
            if claimed:
                gov.del_job("pdf")

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(peak) <= 3
    assert gov.running("pdf") == 0
    assert gov.excluded_types() == []


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((0,), {"min_sleep_ms": 1, "max_sleep_ms": 2}),
        ((1,), {"min_sleep_ms": 5, "max_sleep_ms": 2}),
    ],
)
def test_bad_bounds__are_refused(args, kwargs):
    with pytest.raises(ValueError, match="must be"):
        Governor(*args, **kwargs)
