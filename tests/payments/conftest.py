"""The Stripe adapter's fixtures: localstripe as a real server (tests/stripe_emulator.py)."""

from collections.abc import Iterator
from typing import Any

import pytest

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
