"""Fixtures of the pages' tests: a browser-like client with a session, demo mode,
a stand-in for the Celery worker, and Redis for the checkout tokens."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.utils import timezone

from demo.sandbox.delivery import notification_deliver
from demo.sandbox.models import Charge, Notification
from demo.sandbox.services import late_success_settle
from demo.shop.story import STORY_LOCK
from orders.models import Order
from orders.services import shipment_create
from reconcile.locks import lock_key
from tests.factories import UserFactory

# Nothing listens on the discard port: a provider call there is refused at once.
CLOSED_URL = "http://127.0.0.1:9"


@pytest.fixture
def demo_mode(settings: Any) -> None:
    settings.DEMO_MODE = True


@pytest.fixture
def alice() -> User:
    """A customer with a seeded demo user's name (the chaos panel lets them in)."""
    return UserFactory.create(username="alice")


@pytest.fixture
def web(user: User) -> Client:
    """A browser-like client: session login and CSRF cookies, no token."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def web_for() -> Any:
    def make(user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture(autouse=True)
def no_provider(settings: Any) -> None:
    """By default the provider and the shop's own URL lead nowhere (nothing listens).

    A page test must never reach a demo someone runs on the default port 8000. Tests
    that need them request ``sandbox`` (the live server), which sets both after this.
    """
    settings.PROVIDER_BASE_URL = f"{CLOSED_URL}/sandbox"
    settings.SHOP_BASE_URL = CLOSED_URL


@pytest.fixture
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(django_settings.REDIS_URL)


class BackgroundWork:
    """Stands in for the Celery worker in tests that need its effects.

    Makes the provider's due late successes happen and delivers its pending
    notifications (the sandbox's own services, the second over HTTP to the live
    server), and ships PAID orders (the service the fulfil task calls), in a
    loop, in its own thread and connection.
    """

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="background-work", daemon=True)

    def once(self) -> None:
        for charge_id in Charge.objects.filter(late_success_at__lte=timezone.now()).values_list(
            "id", flat=True
        ):
            late_success_settle(charge_id=charge_id)
        for notification_id in Notification.objects.filter(
            status=Notification.Status.PENDING
        ).values_list("id", flat=True):
            notification_deliver(notification_id=notification_id)
        for order_id in Order.objects.filter(
            status=Order.Status.PAID, shipment__isnull=True
        ).values_list("id", flat=True):
            shipment_create(order_id=order_id)

    def loop(self) -> None:
        try:
            while not self.stopping.wait(0.05):
                self.once()
        finally:
            connections.close_all()


@pytest.fixture
def background_work() -> Iterator[BackgroundWork]:
    work = BackgroundWork()
    work.thread.start()
    try:
        yield work
    finally:
        work.stopping.set()
        work.thread.join(timeout=10)


@pytest.fixture(autouse=True)
def no_story_left_running(redis_client: redis.Redis) -> None:
    """A story lock left by a test run that was killed mid-story would hold for its TTL
    and refuse every story of the next run: each test starts with none."""
    redis_client.delete(lock_key(STORY_LOCK))
