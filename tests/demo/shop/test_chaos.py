"""The chaos panel: demo mode only, staff or the demo users, each action doing what it says."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from demo.sandbox.models import Fault
from demo.shop import chaos
from demo.shop.chaos import FAULT_MODES
from orders.models import Order
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ACTIONS = [
    ("/chaos/faults/", {"mode": "decline", "count": "1"}),
    ("/chaos/faults/clear/", {}),
    ("/chaos/repeat/", {}),
    ("/chaos/burst/", {}),
    ("/chaos/kill-worker/", {}),
]


@pytest.fixture
def panel(demo_mode: None, alice: Any, web_for: Any) -> Client:
    return web_for(alice)


@pytest.fixture
def staff_panel(demo_mode: None, web_for: Any) -> Client:
    return web_for(UserFactory.create(username="staff", is_staff=True))


def test_the_panel_is_refused_outside_demo_mode_even_to_staff(settings, web_for):
    settings.DEMO_MODE = False
    staff = web_for(UserFactory.create(is_staff=True))

    responses = [staff.get("/chaos/")] + [staff.post(url, data) for url, data in ACTIONS]

    for response in responses:
        assert response.status_code == 403
        assert "only in demo mode" in response.content.decode()
    assert not Fault.objects.exists()
    assert Order.objects.count() == 0


def test_the_panel_is_refused_to_a_customer_who_is_not_a_demo_user(demo_mode, web):
    responses = [web.get("/chaos/")] + [web.post(url, data) for url, data in ACTIONS]

    for response in responses:
        assert response.status_code == 403
        assert "staff and the demo users" in response.content.decode()
    assert not Fault.objects.exists()


def test_anonymous_visitors_are_refused_too(demo_mode):
    assert Client().get("/chaos/").status_code == 403


def test_a_visitor_is_told_why_and_led_to_the_login_and_back(demo_mode):
    page = Client().get("/chaos/").content.decode()
    # A form posted once the session ended: back to the page that posted it.
    posted = Client().post(
        "/chaos/faults/", {"mode": "decline"}, headers={"referer": "http://testserver/chaos/"}
    )

    assert "The chaos panel is for staff and the demo users (alice, bob, staff)." in page
    back = '<p id="refused-login"><a href="/login/?next=/chaos/">Log in</a>'
    assert back in page
    assert posted.status_code == 403
    assert back in posted.content.decode()
    assert not Fault.objects.exists()


def test_outside_demo_mode_no_login_is_offered_where_no_login_helps(settings):
    settings.DEMO_MODE = False

    page = Client().get("/chaos/").content.decode()

    assert "only in demo mode" in page
    assert 'id="refused-login"' not in page  # the header's own "Log in" link stays


def test_the_panel_explains_every_fault_mode(panel):
    page = panel.get("/chaos/").content.decode()

    assert {fault.mode for fault in FAULT_MODES} == set(Fault.Mode.values)
    for fault in FAULT_MODES:
        assert f"<code>{fault.mode}</code>" in page
        assert fault.what_should_happen.split(":")[0] in page
    assert "Only staff may kill the worker" in page  # alice sees why, not a button


def test_switching_a_fault_on_arms_it_at_the_provider(staff_panel):
    response = staff_panel.post(
        "/chaos/faults/", {"mode": "timeout_after_commit", "count": "2", "delay_s": "4.5"}
    )

    fault = Fault.objects.get()
    assert (fault.mode, fault.remaining, fault.delay_s) == ("timeout_after_commit", 2, 4.5)
    assert "is on for the next 2 charge(s)" in response.content.decode()
    assert "What should happen:" in response.content.decode()


def test_a_bad_fault_form_says_so_next_to_the_field(staff_panel):
    response = staff_panel.post("/chaos/faults/", {"mode": "callback_duplicates", "count": "0"})

    page = response.content.decode()
    assert 'id="id_callback_duplicates_count-error"' in page
    assert "greater than or equal to 1" in page
    assert not Fault.objects.exists()


def test_switching_all_faults_off(staff_panel):
    staff_panel.post("/chaos/faults/", {"mode": "decline", "count": "1"})

    response = staff_panel.post("/chaos/faults/clear/")

    assert not Fault.objects.exists()
    assert "All faults are off" in response.content.decode()


def test_chaos_forms_need_a_csrf_token(demo_mode, alice):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)

    assert strict.post("/chaos/faults/", {"mode": "decline", "count": "1"}).status_code == 403
    assert not Fault.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_same_request_3_times_makes_one_order(sandbox, panel, alice, product):
    response = panel.post("/chaos/repeat/")

    result = response.context["repeat"]
    assert [(a.status, a.replayed) for a in result.answers] == [
        (201, False),
        (201, True),
        (201, True),
    ]
    assert result.orders_made == 1
    assert Order.objects.get().user == alice
    assert "Orders made with this key: 1" in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_requests_make_one_order(sandbox, panel, product, monkeypatch):
    # Fewer than the panel's 100 (20 at a time): other suites share this database server.
    monkeypatch.setattr(chaos, "BURST_REQUESTS", 12)
    monkeypatch.setattr(chaos, "BURST_POOL", 6)

    response = panel.post("/chaos/burst/")

    result = response.context["burst"]
    assert sum(count for _summary, count in result.tally) == 12
    assert ("201 Created, fresh", 1) in result.tally
    assert result.orders_made == 1
    assert Order.objects.count() == 1


def test_repeat_says_so_when_the_shop_is_not_reachable(panel, product):
    response = panel.post("/chaos/repeat/")  # SHOP_BASE_URL leads nowhere here

    assert "is not reachable" in response.content.decode()


# --- Kill the worker ---------------------------------------------------------------


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A stand-in worker (argv has celery and worker), leading its own process group
    like the demo's, with one pool child; its pid in a pid file where the panel looks."""
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, "celery", "worker"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    child = int(process.stdout.readline())
    pidfile = tmp_path / "worker.pid"
    pidfile.write_text(f"{process.pid}\n")
    monkeypatch.setattr("demo.runner.WORKER_PIDFILE", pidfile)
    yield process, child
    for pid in (process.pid, child):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=5)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie is dead, only not reaped yet


def test_switching_faults_is_refused_to_customers_and_the_panel_says_so(panel):
    page = panel.get("/chaos/").content.decode()
    armed = panel.post("/chaos/faults/", {"mode": "decline", "count": "1"})
    cleared = panel.post("/chaos/faults/clear/")

    assert "Only staff switch the provider's faults" in page
    assert "Switch on" not in page
    assert "Switch all faults off" not in page
    assert armed.status_code == cleared.status_code == 403
    assert not Fault.objects.exists()


def test_the_redelivery_demo_is_staff_only(panel):
    assert panel.post("/chaos/redelivery/").status_code == 403
    assert panel.post("/chaos/redelivery/abc/kill/").status_code == 403


def test_killing_the_worker_is_refused_to_non_staff(panel, worker):
    process, child = worker

    response = panel.post("/chaos/kill-worker/")

    assert response.status_code == 403
    assert "Only staff" in response.content.decode()
    assert alive(process.pid)
    assert alive(child)


def test_killing_the_worker_sigkills_its_whole_process_group(staff_panel, worker):
    process, child = worker

    response = staff_panel.post("/chaos/kill-worker/")

    assert f"Sent SIGKILL to the worker (pid {process.pid})" in response.content.decode()
    assert process.wait(timeout=10) == -signal.SIGKILL
    # The pool child is not our child, so it cannot be wait()ed for: watch it go.
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_a_stale_pid_file_never_kills_an_unrelated_process(staff_panel, tmp_path, monkeypatch):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pidfile = tmp_path / "worker.pid"
    pidfile.write_text(f"{bystander.pid}\n")
    monkeypatch.setattr("demo.runner.WORKER_PIDFILE", pidfile)
    try:
        response = staff_panel.post("/chaos/kill-worker/")

        assert "is not a Celery worker" in response.content.decode()
        assert alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def test_without_the_demo_supervisor_there_is_no_worker_to_kill(staff_panel, tmp_path, monkeypatch):
    monkeypatch.setattr("demo.runner.WORKER_PIDFILE", tmp_path / "missing.pid")

    response = staff_panel.post("/chaos/kill-worker/")

    assert "only `make demo` runs" in response.content.decode()


def test_where_the_worker_is_not_beside_the_server_the_panel_says_so_instead_of_a_button(
    staff_panel, tmp_path, monkeypatch
):
    # Given no supervised worker beside this server (docker compose: another container)
    monkeypatch.setattr("demo.runner.WORKER_PIDFILE", tmp_path / "missing.pid")

    page = staff_panel.get("/chaos/").content.decode()

    assert "Kill the worker (SIGKILL)" not in page
    assert "The panel cannot kill the worker from here" in page
    assert "<code>docker compose kill worker</code>" in page


def test_beside_the_supervised_worker_the_panel_offers_the_kill(staff_panel, worker):
    page = staff_panel.get("/chaos/").content.decode()

    assert "Kill the worker (SIGKILL)" in page
    assert "The panel cannot kill the worker from here" not in page


def test_an_unknown_fault_mode_is_said_in_words(staff_panel):
    response = staff_panel.post("/chaos/faults/", {"mode": "meteor_strike", "count": "1"})

    assert "There is no fault mode called &#x27;meteor_strike&#x27;" in response.content.decode()
    assert not Fault.objects.exists()
