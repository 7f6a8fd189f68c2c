"""What every experiment gets: where the shop answers, how big to go, fresh actors."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, connections
from rest_framework.authtoken.models import Token

from orders.models import Order, Product
from orders.services import LineRequest, product_create

T = TypeVar("T")


@dataclass(frozen=True)
class Scale:
    """How many requests each experiment fires: ``make lab``'s sizes, and the tests'."""

    # 2: intents of one account, keyed by timestamp, all at once. As many as the
    # default MAX_OPEN_ORDERS_PER_USER lets one account hold unpaid (the lab keeps
    # the caps on; e02.intent_count lowers it to a smaller cap).
    concurrent_intents: int = 20
    token_submits: int = 100  # 5: submits of one checkout token, all at once
    concurrent_pays: int = 50  # 9: pays of one order, all at once
    days: int = 30  # 4: the simulated month
    keys_per_day: int = 1000  # 4
    storm_clients: int = 80  # 8


@dataclass(frozen=True)
class Lab:
    """``base_url`` serves the shop's API and the sandbox provider (PROVIDER_BASE_URL)."""

    base_url: str
    scale: Scale

    def customer(self, label: str) -> User:
        """A new user with an API token; every experiment counts only its own users."""
        name = f"lab-{label}-{secrets.token_hex(4)}"
        # No password (unusable): nobody logs in as a lab user, and hashing one
        # costs more than most experiments.
        user = get_user_model().objects.create_user(username=name, password=None)
        Token.objects.create(user=user)
        return user

    def product(self, *, stock: int = 100_000, price: int = 1999) -> Product:
        return product_create(
            sku=f"LAB-{secrets.token_hex(4).upper()}",
            name="Lab tea",
            price=price,
            currency="CNY",
            stock=stock,
        )

    @staticmethod
    def orders_of(user: User) -> int:
        """How many orders the database holds for ``user``: what experiments count."""
        return Order.objects.filter(user=user).count()

    @staticmethod
    def one(product: Product, quantity: int = 1) -> list[LineRequest]:
        return [LineRequest(sku=product.sku, quantity=quantity)]


def at_once(count: int, call: Callable[[int], T]) -> list[T | BaseException]:
    """``call(i)`` in ``count`` threads released together by a barrier.

    Each thread has its own database connection (Django's are per thread),
    closed in ``finally``. What a call raised is returned in its place, so one
    loser of a race does not hide what the others did.
    """
    connection.close()
    barrier = threading.Barrier(count)

    def run(index: int) -> T | BaseException:
        try:
            barrier.wait()
            return call(index)
        except Exception as error:
            return error
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))
