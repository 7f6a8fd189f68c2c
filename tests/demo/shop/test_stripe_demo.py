"""In the Stripe demo, what needs the sandbox says why it is not there.

The story scripts the sandbox's faults, the chaos panel arms them, the books
read its wallets: the Stripe demo's provider (localstripe) has none of these.
Each asks the provider for the capability (``TakesScriptedFaults``,
``KeepsWallets``) and, without it, says why in words: never a 500, never an
order, a customer or a fault left behind by a feature that could not run.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import translation

from demo.sandbox.models import Fault
from demo.shop.story import StoryUnavailable, story_run
from orders.models import Order
from tests.demo.shop.conftest import CLOSED_URL
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

NOT_HERE = "scripted faults"  # what each refusal names: the thing the provider lacks


@pytest.fixture
def stripe_demo(settings: Any, demo_mode: None) -> None:
    """The shop configured as `make demo PAYMENT_PROVIDER=stripe` runs it."""
    settings.PAYMENT_PROVIDER = "stripe"
    settings.STRIPE_API_BASE = CLOSED_URL
    settings.STRIPE_API_KEY = "sk_test_onceshop_demo"
    settings.STRIPE_WEBHOOK_SECRET = "whsec_onceshop_demo_only"


@pytest.fixture
def staff() -> User:
    return UserFactory.create(username="staff", is_staff=True)


def _left_behind() -> tuple[int, int, int]:
    return (
        Order.objects.count(),
        User.objects.filter(username__startswith="story-").count(),
        Fault.objects.count(),
    )


@pytest.mark.django_db(transaction=True)
def test_the_story_says_why_it_cannot_run_before_it_does_anything(
    stripe_demo, staff, product, live_server
):
    # The shop answers (its catalogue, its orders): only the provider lacks the faults.
    with pytest.raises(StoryUnavailable, match=NOT_HERE):
        story_run(base_url=live_server.url)

    assert _left_behind() == (0, 0, 0)


def test_make_story_says_so_in_one_line(stripe_demo, staff):
    # In English, whatever language an earlier test of this thread left active.
    with translation.override("en"), pytest.raises(CommandError, match=NOT_HERE) as refused:
        call_command("story", stdout=StringIO())

    assert "\n" not in str(refused.value)
    assert _left_behind() == (0, 0, 0)


def test_the_story_button_answers_a_page_that_says_why(stripe_demo, staff, web_for):
    response = web_for(staff).post("/story/")

    assert response.status_code == 200
    assert NOT_HERE in response.content.decode()
    assert _left_behind() == (0, 0, 0)


def test_the_chaos_panel_lists_no_fault_and_says_why(stripe_demo, staff, web_for):
    page = web_for(staff).get("/chaos/")

    html = page.content.decode()
    assert page.status_code == 200
    assert NOT_HERE in html
    assert reverse("storefront:chaos-fault-arm") not in html
    assert 'name="mode"' not in html
    # What does not need the sandbox is still there.
    assert "repeat" in html


def test_arming_a_fault_is_refused_with_a_reason_and_arms_nothing(stripe_demo, staff, web_for):
    staff_page = web_for(staff)

    armed = staff_page.post(reverse("storefront:chaos-fault-arm"), {"mode": "decline", "count": 1})
    cleared = staff_page.post(reverse("storefront:chaos-fault-clear"))

    assert armed.status_code == 200
    assert NOT_HERE in armed.content.decode()
    assert cleared.status_code == 200
    assert Fault.objects.count() == 0


def test_the_books_say_the_provider_keeps_no_wallets_rather_than_no_payments(
    stripe_demo, staff, web_for
):
    page = web_for(staff).get("/books/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "No payments yet." not in html
    assert "keeps no wallets" in html
