"""The guided story, driven over HTTP against the live server like a real client."""

import re
import threading
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import Client

from demo.shop.answers import Answer
from demo.shop.story import ABOUT_S, STORY_LOCK, StoryReport, StoryUnavailable, story_run
from demo.shop.story.observe import Settler
from demo.shop.story.report import TallyRow
from edge.money import money
from orders.models import Order, Shipment
from payments.errors import PaymentOutcomeUnknown
from payments.models import LedgerEntry, Payment
from reconcile.locks import single_runner
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

# The reading's gateway waits three seconds; the test needs only the order of events.
GATEWAY_DELAY_S = 0.2
WAIT_S = 15.0


@pytest.fixture
def operator():
    return UserFactory.create(username="staff", is_staff=True)


def test_the_founding_scenario_changes_the_world_once(
    sandbox, live_server, operator, product, background_work
):
    report = story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)

    # The requests the clients sent, in time order (background work interleaves).
    requests = [
        (step.actor, step.result)
        for step in report.steps
        if step.request.startswith("POST /api") and step.actor != "provider"
    ]
    assert requests == [
        ("customer", "200 token issued"),
        ("customer", "201 Created, fresh"),
        ("customer", "sent"),  # the first click
        ("customer", "409 idempotency-key-in-use, not stored"),  # the double click: in flight
        ("shop", "503 payment-outcome-unknown, not stored"),  # the first click: timed out
        ("gateway", "200 OK, fresh"),  # the retry: resumed, its answer stored
        ("customer", "200 OK, replayed"),  # the reload: the stored answer
        # The second chapter: another order, declined now, given up.
        ("customer", "201 Created, fresh"),
        ("customer", "402 payment-declined, fresh"),
        ("customer", "200 OK, fresh"),
    ]
    assert ("shop", "shipped once") in [(step.actor, step.result) for step in report.steps]
    # One order, one debit, one shipment, for a customer who did not exist before;
    # the late capture of the order they gave up, refunded.
    assert report.ok, report.tally
    order = Order.objects.get(user__username=report.customer, status="PAID")
    assert [(row.what, row.count, row.expected) for row in report.tally] == [
        ("paid orders", 1, 1),
        ("capture ledger entries (debits)", 1, 1),
        ("shipments", 1, 1),
        ("orders cancelled after the decline", 1, 1),
        ("late captures booked as orphaned", 1, 1),
        ("orphaned captures refunded in full", 1, 1),
        ("successful charges at the provider", 2, 2),
        ("provider: charged - refunded", order.amount, order.amount),
    ]
    assert LedgerEntry.objects.filter(order=order).count() == 1
    assert Shipment.objects.filter(order=order).count() == 1
    assert report.audit is not None
    assert report.audit.ok, report.audit.findings


def test_the_narration_is_in_time_order_and_names_who_settled_the_payment(
    sandbox, live_server, operator, product, background_work
):
    report = story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)

    times = [step.at_s for step in report.steps]
    assert times == sorted(times)
    # Exactly one step settles the payment, and it names the one who did, as the
    # rows tell it: here the worker stand-in delivers the notification while the
    # first click still waits on the provider.
    settling = [step for step in report.steps if step.action.startswith("settles the payment")]
    assert len(settling) == 1
    assert report.settled_by == Settler.NOTIFICATION.value
    assert settling[0].action == f"settles the payment: {report.settled_by}"
    notified = next(step for step in report.steps if step.actor == "provider")
    assert notified.result == "applied, answered 200"
    assert notified.at_s <= settling[0].at_s
    retry = next(step for step in report.steps if step.actor == "gateway")
    assert "already settled by the notification" in retry.explanation
    assert "it settled the payment" not in retry.explanation
    # The 503's sentence is said once, where the 503 is told.
    unknown = Answer(503, False, {"code": PaymentOutcomeUnknown.code}).why
    assert sum(step.explanation.count(unknown) for step in report.steps) == 1


def test_a_late_success_after_the_customer_gave_up_is_told_as_it_happened_and_refunded(
    sandbox, live_server, operator, product, background_work
):
    report = story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)

    # Given the customer's second order, declined now and cancelled
    late = [step for step in report.steps if step.at_s >= _step(report, "pays the new").at_s]
    told = [(step.actor, step.action.split(":")[0], step.result) for step in late]
    cancelled = Order.objects.get(user__username=report.customer, status="CANCELLED")
    [attempt] = Payment.objects.filter(order=cancelled)
    # Then the story tells, in time order, what the rows say happened after that
    assert [(actor, result.split(",")[0]) for actor, _, result in told] == [
        ("customer", "402 payment-declined"),
        ("customer", "200 OK"),  # the cancel
        ("provider", f"SUCCESS {attempt.trade_no}"),  # captured after all
        ("provider", "deferred"),  # notified; the shop cannot apply it
        ("reconciler", "payment ORPHANED (order-cancelled)"),
        ("reconciler", "refund SUCCEEDED"),
    ]
    assert [step.at_s for step in late] == sorted(step.at_s for step in late)
    # The provider's capture is told in major units, with its currency (never "2500 CNY").
    capture = next(step for step in late if step.result.startswith("SUCCESS"))
    assert capture.result == f"SUCCESS {attempt.trade_no}, {money(attempt.amount, 'CNY')}"
    booked = _step(report, "asks the provider about the attempt")
    assert f"automatic refund R{attempt.out_trade_no}-1 started" in booked.result
    # The beat's reconciler waits RECONCILE_AFTER_S; the story said it ran the step.
    assert "the story runs its step for this one now" in booked.explanation
    refunded = _step(report, "refunds the orphaned capture")
    assert refunded.action == "refunds the orphaned capture (orphaned-capture)"
    assert refunded.result.endswith("ledger entry orphan_refund")
    # And the books: the orphaned capture and its refund, in their own kinds
    assert (attempt.status, attempt.failure_code) == ("ORPHANED", "order-cancelled")
    kinds = LedgerEntry.objects.filter(payment=attempt).values_list("kind", "amount")
    assert sorted(kinds) == [
        ("orphan_capture", cancelled.amount),
        ("orphan_refund", cancelled.amount),
    ]
    assert cancelled.refunded_amount == 0  # the order's totals never count it
    assert report.audit is not None
    assert report.audit.ok, report.audit.findings


def _step(report: StoryReport, action: str):
    return next(step for step in report.steps if step.action.startswith(action))


def test_a_retry_that_asked_the_provider_is_named_as_the_settler(
    sandbox, live_server, operator, product
):
    # No worker: no notification is delivered, so only the same-key retry, asking the
    # provider about the attempt, can settle the payment.
    report = story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=0.5)

    assert report.settled_by == Settler.RETRY_QUERY.value
    retry = next(step for step in report.steps if step.actor == "gateway")
    assert "asked the provider about the attempt" in retry.explanation
    notified = next(step for step in report.steps if step.actor == "provider")
    assert notified.result == "not received yet"


def test_the_story_says_clearly_when_the_shop_is_not_reachable(operator):
    with pytest.raises(StoryUnavailable, match=r"is not reachable.*make demo"):
        story_run(base_url="http://127.0.0.1:9", gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)


def test_the_story_says_clearly_when_there_is_no_staff_to_script_the_provider(
    sandbox, live_server, product
):
    with pytest.raises(StoryUnavailable, match="seed_demo"):
        story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)


def test_the_command_prints_each_step_and_the_books(
    sandbox, live_server, operator, product, background_work
):
    out = StringIO()

    call_command(
        "story", "--base-url", live_server.url, "--gateway-delay", "0.2", "--wait", "15", stdout=out
    )

    text = out.getvalue()
    # Progress as it goes, each part with the seconds since the start, before the story
    parts = re.findall(r"^   \[ *(\d+\.\d) s\] (.+)$", text, re.M)
    assert [part.removesuffix(" ...").split(":")[0] for _at, part in parts] == [
        "chapter 1",
        "waiting for the background work",
        "chapter 2",
        "reading the books and running the audit",
        "done.",
    ]
    assert [float(at) for at, _part in parts] == sorted(float(at) for at, _part in parts)
    assert text.index("done.") < text.index("\n1. [")
    assert "503 payment-outcome-unknown, not stored" in text
    assert "409 idempotency-key-in-use, not stored" in text
    assert "200 OK, replayed" in text
    assert "why: " in text
    assert "402 payment-declined, fresh" in text
    assert "refund SUCCEEDED" in text
    assert "The audit (whole shop): clean" in text
    assert "One order, one debit, one shipment." in text
    # The provider's net debit, as money: the order's amount, in major units.
    paid = Order.objects.get(status="PAID")
    net = re.search(r"^   provider: charged - refunded +(\S+ \S+) +(\S+ \S+)$", text, re.M)
    assert net is not None, text
    assert net.groups() == (money(paid.amount, paid.currency),) * 2


def test_the_command_fails_with_a_clear_message_when_the_shop_is_down(operator):
    with pytest.raises(CommandError, match="is not reachable"):
        call_command("story", "--base-url", "http://127.0.0.1:9", stdout=StringIO())


def test_the_home_page_button_runs_the_same_story(demo_mode, alice, web_for, monkeypatch):
    # The view is thin: it shows what story_run reports (run for real above).
    report = StoryReport(customer="story-test", order_number="N1")
    monkeypatch.setattr("demo.shop.views.story.story_run", lambda **_: report)
    page = web_for(alice)

    home = page.get("/").content.decode()
    response = page.post("/story/")

    assert 'action="/story/"' in home
    assert response.context["report"] is report
    assert "story-test" in response.content.decode()


@pytest.mark.parametrize(
    ("language", "first", "second"),
    [
        ("en", "One order, one debit, one shipment.", "The late capture of the order given up"),
        ("zh-hans", "一次发货", "迟到的扣款"),
    ],
)
def test_the_page_verdict_speaks_of_both_chapters_as_the_command_does(
    demo_mode, alice, web_for, monkeypatch, language, first, second
):
    # The tally holds both chapters' rows; the verdict under it must name both.
    report = StoryReport(
        customer="story-test",
        order_number="N1",
        tally=[TallyRow("debits", 1, 1), TallyRow("late captures refunded", 1, 1)],
    )
    monkeypatch.setattr("demo.shop.views.story.story_run", lambda **_: report)

    page = web_for(alice).post("/story/", HTTP_ACCEPT_LANGUAGE=language).content.decode()

    assert first in page
    assert second in page


def test_the_story_page_shows_the_books_amounts_as_money(demo_mode, alice, web_for, monkeypatch):
    report = StoryReport(
        customer="story-test",
        order_number="N1",
        tally=[TallyRow("provider: charged - refunded", 2500, 2500, "CNY")],
    )
    monkeypatch.setattr("demo.shop.views.story.story_run", lambda **_: report)

    page = web_for(alice).post("/story/").content.decode()

    assert "<td>25.00 CNY</td><td>25.00 CNY</td>" in page
    assert "<td>2500</td>" not in page


def test_the_intros_tell_the_chapters_as_they_run(demo_mode, alice, web_for, monkeypatch):
    # The second chapter orders again as the story's one customer (late_success.py
    # pays with scene.token; the full run above finds its cancelled order under
    # report.customer), and a story takes ABOUT_S seconds.
    monkeypatch.setattr(
        "demo.shop.views.story.story_run", lambda **_: StoryReport(customer="story-test")
    )
    web = web_for(alice)

    story = web.post("/story/").content.decode()
    home = web.get("/").content.decode()

    assert "second customer" not in story
    assert "Then the same customer orders again" in story
    assert "Then the same customer's second order" in home
    assert f"It takes about {ABOUT_S} seconds." in home


def test_the_story_button_is_refused_outside_demo_mode(settings, alice, web_for):
    settings.DEMO_MODE = False

    response = web_for(alice).post("/story/")

    assert response.status_code == 403


def test_the_story_scripts_the_provider_the_shop_pays_through_not_the_shop(
    sandbox, live_server, operator, product, settings
):
    # The demo serves the sandbox on its own port, never under the shop's URL: with
    # the provider unreachable, the story must stop there, not find /sandbox on the shop.
    settings.PROVIDER_BASE_URL = "http://127.0.0.1:9/sandbox"

    with pytest.raises(StoryUnavailable, match=r"127\.0\.0\.1:9/sandbox is not reachable"):
        story_run(base_url=live_server.url, gateway_delay_s=GATEWAY_DELAY_S, wait_s=WAIT_S)


def test_a_visitor_sees_the_story_and_a_login_that_brings_them_back_to_it(demo_mode):
    home = Client().get("/").content.decode()

    assert 'id="story"' in home
    assert "The guided story" in home
    assert 'href="/login/?next=/%23story"' in home
    assert 'action="/story/"' not in home  # the button itself is for those who may run it


def test_a_customer_who_may_not_run_the_story_is_told_who_may(demo_mode, web):
    home = web.get("/").content.decode()

    assert "The story runs for staff and the demo users (alice, bob, staff)" in home
    assert 'action="/story/"' not in home


def test_outside_demo_mode_the_home_page_has_no_story(settings):
    settings.DEMO_MODE = False

    assert 'id="story"' not in Client().get("/").content.decode()


def test_a_second_post_while_a_story_runs_starts_no_second_story(
    demo_mode, alice, web_for, monkeypatch
):
    # Given a story that has begun and is still in its first chapter (held there, in
    # the web request's own thread, as a real one is for seconds)
    started, finish = threading.Event(), threading.Event()
    chapters: list[object] = []

    def first_chapter(scene: object) -> None:
        chapters.append(scene)
        started.set()
        assert finish.wait(timeout=30)
        raise StoryUnavailable("stopped by the test")

    monkeypatch.setattr("demo.shop.story.scenario_run", first_chapter)
    first: list[Any] = []

    def click() -> None:
        try:
            first.append(web_for(alice).post("/story/"))
        finally:
            connections.close_all()

    running = threading.Thread(target=click, name="first-click")
    running.start()
    try:
        assert started.wait(timeout=30)
        # When a second post arrives meanwhile (a second click, another browser)
        second = web_for(alice).post("/story/")
    finally:
        finish.set()
        running.join(timeout=30)

    # Then it is refused, saying why, and began nothing; the first ran its course
    assert second.status_code == 409
    assert "A story is already running" in second.content.decode()
    assert len(chapters) == 1
    assert first[0].status_code == 200
    assert "stopped by the test" in first[0].content.decode()
    # And once the first has ended, the next one runs
    assert web_for(alice).post("/story/").status_code == 200
    assert len(chapters) == 2


def test_make_story_beside_a_running_story_says_so_and_does_nothing(operator):
    with single_runner(name=STORY_LOCK, ttl_s=60) as mine:
        assert mine  # a story holds it, as the button's does while it runs
        with pytest.raises(CommandError, match="already running"):
            call_command("story", "--base-url", "http://127.0.0.1:9", stdout=StringIO())

    assert not get_user_model().objects.filter(username__startswith="story-").exists()
