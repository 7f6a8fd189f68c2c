"""The guided story, driven over HTTP against the live server like a real client."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from orders.models import Order, Shipment
from payments.models import LedgerEntry
from storefront.story import StoryReport, StoryUnavailable, story_run
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

    results = [(step.actor, step.result) for step in report.steps]
    assert results[:3] == [
        ("customer", "200 token issued"),
        ("customer", "201 OK, fresh"),
        ("operator", "201 armed"),
    ]
    assert results[3:7] == [
        ("customer", "503 payment-outcome-unknown, fresh"),  # the first click: timed out
        ("customer", "409 idempotency-key-in-use, fresh"),  # the double click: in flight
        ("gateway", "200 OK, fresh"),  # the retry resumed and found the charge
        ("customer", "200 OK, replayed"),  # the reload: the stored answer
    ]
    assert results[7][0] == "provider"
    assert results[7][1] in {
        "applied, answered 200",
        "duplicate, answered 200",
    }
    assert results[8] == ("shop", "shipped once")
    # One order, one debit, one shipment, for a customer who did not exist before.
    assert report.ok, report.tally
    assert [(row.what, row.count) for row in report.tally] == [
        ("orders", 1),
        ("paid orders", 1),
        ("ledger entries (debits)", 1),
        ("successful charges at the provider", 1),
        ("shipments", 1),
    ]
    order = Order.objects.get(user__username=report.customer)
    assert LedgerEntry.objects.filter(order=order).count() == 1
    assert Shipment.objects.filter(order=order).count() == 1
    assert report.audit is not None
    assert report.audit.ok, report.audit.findings


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
    assert "503 payment-outcome-unknown, fresh" in text
    assert "409 idempotency-key-in-use, fresh" in text
    assert "200 OK, replayed" in text
    assert "why: " in text
    assert "The audit (whole shop): clean" in text
    assert "One order, one debit, one shipment." in text


def test_the_command_fails_with_a_clear_message_when_the_shop_is_down(operator):
    with pytest.raises(CommandError, match="is not reachable"):
        call_command("story", "--base-url", "http://127.0.0.1:9", stdout=StringIO())


def test_the_home_page_button_runs_the_same_story(demo_mode, alice, web_for, monkeypatch):
    # The view is thin: it shows what story_run reports (run for real above).
    report = StoryReport(customer="story-test", order_number="N1")
    monkeypatch.setattr("storefront.views.story.story_run", lambda **_: report)
    page = web_for(alice)

    home = page.get("/").content.decode()
    response = page.post("/story/")

    assert 'action="/story/"' in home
    assert response.context["report"] is report
    assert "story-test" in response.content.decode()


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
