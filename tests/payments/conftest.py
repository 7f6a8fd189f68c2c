"""The Stripe adapter's fixtures: localstripe as a real server (tests/stripe_emulator.py)."""

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.stripe_emulator import TEST_KEY, WEBHOOK_SECRET, StripeProxy, localstripe_server


@pytest.fixture(scope="session")
def localstripe_url() -> Iterator[str]:
    yield from localstripe_server()


@pytest.fixture
def stripe_shop(localstripe_url: str, live_server: Any, settings: Any) -> str:
    """The shop configured for Stripe (PAYMENT_PROVIDER=stripe) against localstripe."""
    settings.PAYMENT_PROVIDER = "stripe"
    settings.STRIPE_API_BASE = localstripe_url
    settings.STRIPE_API_KEY = TEST_KEY
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.SHOP_BASE_URL = live_server.url
    settings.PROVIDER_TIMEOUT_S = 5.0
    return localstripe_url


@pytest.fixture
def stripe_proxy(stripe_shop: str, settings: Any) -> Iterator[StripeProxy]:
    """The shop on Stripe through ``StripeProxy`` (what localstripe cannot show)."""
    proxy = StripeProxy(stripe_shop)
    settings.STRIPE_API_BASE = proxy.url
    try:
        yield proxy
    finally:
        proxy.close()


# Where localstripe's webhooks go when no test listens: a closed port.
WEBHOOKS_NOWHERE = {"url": "http://127.0.0.1:9/", "secret": "whsec_nowhere"}


@pytest.fixture
def stripe_webhooks(stripe_shop: str, live_server: Any) -> Iterator[None]:
    """localstripe signs and POSTs its events to the shop, for this test only.

    localstripe lives for the session and keeps its registrations: pointed back at a
    closed port afterwards, so a later test's payments never send their events into
    another test's database."""
    registered = requests.post(
        f"{stripe_shop}/_config/webhooks/onceshop",
        data={"url": f"{live_server.url}/api/v1/callbacks/stripe/", "secret": WEBHOOK_SECRET},
        timeout=5,
    )
    assert registered.status_code == 200
    try:
        yield
    finally:
        requests.post(f"{stripe_shop}/_config/webhooks/onceshop", data=WEBHOOKS_NOWHERE, timeout=5)
