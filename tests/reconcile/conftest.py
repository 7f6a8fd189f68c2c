"""Fixtures of the reconciler's tests: providers that hang or are gone, and attempts
left unknown the quick way (through the services, as a crashed request leaves them)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import close_old_connections, connection
from django.utils import timezone

from orders.models import Order, Product
from orders.services import LineRequest, order_create
from payments.models import Payment
from payments.providers import get_provider
from payments.services import payment_create, payment_mark_unknown, provider_idempotency_key
from tests.conftest import new_key

T = TypeVar("T")


@pytest.fixture
def due_at_once(settings) -> None:
    """The reconciler takes attempts (and the sweep ships orders) without waiting."""
    settings.RECONCILE_AFTER_S = 0
    settings.FULFIL_SWEEP_AFTER_S = 0


@pytest.fixture
def quick_backoff(settings) -> None:
    """Due at once, and a reconciler's backoff of seconds: the first retry waits 0.5
    to 1 s, the later ones up to 2 s."""
    settings.RECONCILE_AFTER_S = 0
    settings.FULFIL_SWEEP_AFTER_S = 0
    settings.RECONCILE_BACKOFF_BASE_S = 1
    settings.RECONCILE_BACKOFF_CAP_S = 2


@pytest.fixture
def far_backoff(quick_backoff: None, settings) -> None:
    """``quick_backoff``, but a retry waits half an hour at least: base AND cap, so no
    pass of a test, however loaded the machine, comes after a retry's time."""
    settings.RECONCILE_BACKOFF_BASE_S = settings.RECONCILE_BACKOFF_CAP_S = 3600


@pytest.fixture
def hanging_provider() -> Iterator[str]:
    """A provider URL that accepts connections and never answers (a read timeout)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # the kernel completes the handshakes; nobody ever reads
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/sandbox"
    finally:
        listener.close()


@pytest.fixture
def gone_provider() -> str:
    """A provider URL nobody listens on (connection refused: the provider is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/sandbox"


def charge_at_provider(payment: Payment) -> None:
    """Charge the attempt at the sandbox as the pay flow would have (same derived key)."""
    result = get_provider().charge(
        out_trade_no=payment.out_trade_no,
        amount=payment.amount,
        currency=payment.currency,
        payer=payment.payer,
        notify_url=f"{django_settings.SHOP_BASE_URL}/nowhere/",
        idempotency_key=provider_idempotency_key(payment),
    )
    assert result.status == "SUCCESS", result


@pytest.fixture
def unknown_payment(product: Product) -> Callable[..., Payment]:
    """``unknown_payment(user, charged=True)``: a new order whose attempt is UNKNOWN.

    What a request leaves after a provider timeout: phase one committed, the
    provider charged (or not), the answer lost. ``age_s`` back-dates it.
    """

    def make(user: User, *, charged: bool, age_s: float = 0) -> Payment:
        order: Order = order_create(
            user_id=user.pk,
            lines=[LineRequest(sku=product.sku, quantity=1)],
            idempotency_key=new_key(),
        )
        payment = payment_create(user_id=user.pk, order_number=order.number)
        if charged:
            charge_at_provider(payment)
        payment_mark_unknown(payment_id=payment.pk)
        if age_s:
            Payment.objects.filter(pk=payment.pk).update(
                updated_at=timezone.now() - timedelta(seconds=age_s)
            )
        return Payment.objects.get(pk=payment.pk)

    return make


@pytest.fixture
def double_click() -> Callable[[Callable[[], T]], list[T]]:
    """``double_click(act)``: ``act()`` in two threads at once (a person's double click),
    each on its own connection (closed in ``finally``); both results, in finishing order."""

    def click_twice(act: Callable[[], T]) -> list[T]:
        barrier = threading.Barrier(2)
        results: list[T] = []

        def click() -> None:
            try:
                barrier.wait()
                results.append(act())
            finally:
                close_old_connections()
                connection.close()

        threads = [threading.Thread(target=click) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    return click_twice


@pytest.fixture
def ops() -> Any:
    """An operator holding every desk permission (tests/factories.py: desk_operator)."""
    from tests.factories import desk_operator

    return desk_operator(username="ops")


@pytest.fixture
def one_person_desk(settings) -> None:
    """Refunds and accepts need no second person (DESK_APPROVAL_ABOVE as the demo sets it);
    the approval itself is tested in test_desk_approvals.py."""
    settings.DESK_APPROVAL_ABOVE = 10**12
