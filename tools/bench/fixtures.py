"""Rows and a queue the suites set up in the bench process: bench users (payers)
with tokens, products, UNPAID orders and PENDING attempts made by the production
services, how many a scenario needs, and a Celery queue of the bench's own."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from orders.models import Product
from orders.services import LineRequest, order_create, product_create
from payments.services import payment_create

PRICE = 1999
# Far more than any run sells (a few hundred orders a second for minutes): no
# request or pre-creation ever meets out-of-stock.
STOCK = 10**9
# Pre-created rows are committed in batches of this many: the services run as in
# production (nested atomics become savepoints), without one WAL flush per row.
CREATE_BATCH = 200


@dataclass(frozen=True)
class Payer:
    """A bench user: its own token, and its own sandbox wallet (named after it)."""

    user_id: int
    username: str
    token: str


def create_payers(*, prefix: str, count: int) -> list[Payer]:
    """``count`` users with tokens and no usable password (hashing one costs ~0.5 s each)."""
    payers = []
    for index in range(count):
        user = get_user_model()(username=f"{prefix}-{index + 1}")
        user.set_unusable_password()
        user.save()
        token = Token.objects.create(user=user)
        payers.append(Payer(user_id=int(user.pk), username=user.get_username(), token=token.key))
    return payers


def seed_product(sku: str) -> Product:
    return product_create(sku=sku, name="Bench tea", price=PRICE, currency="CNY", stock=STOCK)


def create_orders(*, user_id: int, sku: str, count: int) -> list[str]:
    """``count`` UNPAID one-line orders through ``order_create``; their numbers."""
    numbers: list[str] = []
    while len(numbers) < count:
        with transaction.atomic():  # one commit per batch, not per order
            for _ in range(min(CREATE_BATCH, count - len(numbers))):
                order = order_create(
                    user_id=user_id, lines=[LineRequest(sku=sku, quantity=1)], idempotency_key=None
                )
                numbers.append(order.number)
    return numbers


def rows_needed(*, rate_bound: float, seconds: float, clients: int = 1) -> int:
    """Rows (orders, attempts) each of ``clients`` needs at ``rate_bound`` requests/s
    over all of them (the whole pool, with the default of one)."""
    return max(1, math.ceil(rate_bound * seconds / clients))


def queue_keys(name: str) -> list[str]:
    """The Redis keys of a Celery queue on the Redis transport: its message list, and
    the routing sets kombu writes when it declares the queue (an exchange of the same
    name, for a queue Celery creates on first use)."""
    return [name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}"]


@contextmanager
def bench_queue(*, name: str, redis_url: str) -> Iterator[str]:
    """Route this process's Celery tasks to ``name`` too; delete the queue afterwards.

    The servers under test are given the same name (``CELERY_QUEUE``). Nobody
    consumes it: the bench measures the enqueue (an LPUSH), not the task, and a
    worker of someone else's (on the default queue, another database) must never
    see a bench message. Deleted before as well, in case an interrupted run left one.
    """
    from config.celery import app

    broker = redis.Redis.from_url(redis_url)
    saved = app.conf.task_default_queue
    broker.delete(*queue_keys(name))
    app.conf.task_default_queue = name
    try:
        yield name
    finally:
        app.conf.task_default_queue = saved
        broker.delete(*queue_keys(name))
        broker.close()


@dataclass(frozen=True)
class Attempt:
    """A PENDING payment attempt, as the provider would name it back to us."""

    out_trade_no: str
    amount: int
    currency: str


def pending_attempts(*, user_id: int, sku: str, count: int) -> list[Attempt]:
    """``count`` orders, each with a PENDING attempt (``payment_create``, phase 1 of a pay)."""
    numbers = create_orders(user_id=user_id, sku=sku, count=count)
    attempts: list[Attempt] = []
    for start in range(0, count, CREATE_BATCH):
        with transaction.atomic():  # one commit per batch, not per attempt
            for number in numbers[start : start + CREATE_BATCH]:
                payment = payment_create(user_id=user_id, order_number=number)
                attempts.append(Attempt(payment.out_trade_no, payment.amount, payment.currency))
    return attempts
