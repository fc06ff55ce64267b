"""A real browser edits a cron plan in the console and sees its next five runs change
(docs/console.md "Schedules"). Playwright drives Debian's chromium, as in
tests/console/test_browser.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.auth.models import User

from django_jobqueue import schedules
from django_jobqueue.models import AuditEntry, ScheduleJob
from django_jobqueue.store.audit import Actor
from tests.console.test_browser import browser, pytestmark, shot  # noqa: F401  (fixture)
from tests.testapp.jobtypes.schedules import tick  # noqa: F401  (registers schedules.*)


def runs_shown(page) -> list[datetime]:
    stamps = page.locator("#preview li time").evaluate_all("els => els.map(e => e.dateTime)")
    return [datetime.fromisoformat(stamp).astimezone(UTC) for stamp in stamps]


def test_edit_a_cron_plan_and_see_its_next_five_runs_change(live_server, browser):  # noqa: F811
    schedules.create_cron_plan(
        "default", "nightly", "schedules.tick", cron="0 3 * * *", tz_name="Europe/Paris",
        actor=Actor("cli", "setup"),
    )  # fmt: skip
    User.objects.create_superuser("ops", password="console-test-pw")  # noqa: S106
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(f"{live_server.url}/console/schedules/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "console-test-pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/console/schedules/")
    page.click("#schedules a:text('nightly')")
    page.wait_for_url("**/console/schedule/nightly")
    before = runs_shown(page)
    assert len(before) == 5
    assert all((run.hour, run.minute) in ((1, 0), (2, 0)) for run in before)  # 03:00 Paris
    shot(page, "schedule-before")

    page.fill("#id_cron", "not a cron")
    page.click("#save")
    page.wait_for_load_state()
    assert "got &#x27;not a cron&#x27;" in page.content() or "got 'not a cron'" in page.inner_text(
        "#edit-plan"
    )
    assert runs_shown(page) == before  # nothing saved

    page.fill("#id_cron", "*/20 * * * *")
    page.fill("#id_timezone", "UTC")
    page.click("#save")
    page.wait_for_url("**/console/schedule/nightly")
    assert "Saved schedule nightly: cron, timezone changed." in page.inner_text(".messagelist")
    after = runs_shown(page)
    assert len(after) == 5 and after != before
    assert all(run.minute in (0, 20, 40) and run.second == 0 for run in after)
    assert [(b - a).total_seconds() for a, b in zip(after, after[1:], strict=False)] == [1200.0] * 4
    assert page.inner_text("#plan-when") == "*/20 * * * * (UTC)"
    shot(page, "schedule-after")
    assert ScheduleJob.objects.get().cron == "*/20 * * * *"
    assert list(AuditEntry.objects.values_list("source", "actor", "action")) == [
        ("cli", "setup", "create"), ("console", "ops", "edit"),
    ]  # fmt: skip
