"""The chaos panel's redelivery demo, on a real Celery worker and the real broker."""

import time
from typing import Any

import pytest
from django.test import Client

from demo.shop.redelivery import redelivery_attempts
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

# The worker requeues a task whose process died at once; seconds, not the hour of
# Redis's visibility timeout, even on a loaded machine.
REDELIVERED_WITHIN_S = 10


@pytest.fixture
def staff_panel(demo_mode: None, web_for: Any) -> Client:
    return web_for(UserFactory.create(username="staff", is_staff=True))


def test_a_killed_task_is_redelivered_within_seconds_and_runs_again(staff_panel, worker):
    # Given the demo task running on the real worker
    started = staff_panel.post("/chaos/redelivery/")
    run_id = started["Location"].split("run=")[1].split("#")[0]
    first = worker.wait_for(lambda: redelivery_attempts(run_id=run_id), what="attempt 1")[0]

    # When the pool process running it is SIGKILLed
    killed = staff_panel.post(f"/chaos/redelivery/{run_id}/kill/", follow=True)

    # Then the message goes back to the queue at once and another process runs it again
    assert f"Sent SIGKILL to pid {first.pid}" in killed.content.decode()
    began = time.monotonic()
    attempts = worker.wait_for(
        lambda: (found := redelivery_attempts(run_id=run_id))[1:] and found,
        timeout=REDELIVERED_WITHIN_S,
        what="attempt 2",
    )
    assert time.monotonic() - began < REDELIVERED_WITHIN_S
    assert attempts[1].pid != first.pid
    assert attempts[0].finished is None  # the killed attempt never finished
    page = staff_panel.get(f"/chaos/?run={run_id}").content.decode()
    assert f"pid {attempts[1].pid}" in page
    assert "never: killed, then redelivered" in page
    assert 'http-equiv="refresh"' in page  # attempt 2 runs: the panel keeps refreshing
