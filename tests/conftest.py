"""Shared fixtures. Every test talks to the real PostgreSQL and Redis of the run."""

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from orders.models import Product
from tests.factories import ProductFactory, UserFactory


def new_key() -> str:
    return str(uuid.uuid4())


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {user.auth_token.key}")
    return client


@pytest.fixture
def user() -> User:
    return UserFactory.create()


@pytest.fixture
def other_user() -> User:
    return UserFactory.create()


@pytest.fixture
def client(user: User) -> APIClient:
    return client_for(user)


@pytest.fixture
def product() -> Product:
    return ProductFactory.create(stock=10, price=1999)


@pytest.fixture
def create_order(client: APIClient, product: Product) -> Callable[..., Any]:
    """POST /api/v1/orders/ for one line of ``product``; keyword overrides as needed."""

    def create(
        key: str | None = None,
        quantity: int = 1,
        sku: str | None = None,
        api: APIClient | None = None,
        body: Any = None,
    ) -> Any:
        payload = (
            body
            if body is not None
            else {"lines": [{"sku": sku or product.sku, "quantity": quantity}]}
        )
        headers = {} if key is None else {"Idempotency-Key": key}
        return (api or client).post("/api/v1/orders/", payload, format="json", headers=headers)

    return create
