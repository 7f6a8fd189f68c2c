"""Logins are throttled per client address and per username: the shop's login page,
the admin's, and the token endpoint, all counted before any password is checked."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client, RequestFactory
from rest_framework.authtoken.models import Token

from demo.shop.management.commands.seed_demo import DEMO_USERS
from edge.clients import client_address
from edge.throttling import UserRateThrottle
from tests.factories import DEFAULT_PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

LIMIT = 3


@pytest.fixture(autouse=True)
def low_limits(settings: Any, still_clock: float) -> None:
    settings.LOGIN_RATE_PER_ADDRESS = f"{LIMIT}/min"
    settings.LOGIN_RATE_PER_USERNAME = f"{LIMIT}/min"


def new_address() -> str:
    # Its own address per test: the counters live in Redis and outlive a test.
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def new_user(**fields: Any) -> User:
    # A name no earlier run used: the per-username counters outlive the database.
    return UserFactory.create(username=f"login-{uuid.uuid4().hex[:12]}", **fields)


def page_login(client: Client, username: str, password: str, address: str) -> Any:
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def admin_login(client: Client, username: str, password: str, address: str) -> Any:
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def token_login(client: Client, username: str, password: str, address: str) -> Any:
    return client.post(
        "/api/v1/auth/token/",
        {"username": username, "password": password},
        content_type="application/json",
        REMOTE_ADDR=address,
    )


LOGINS = [
    pytest.param(page_login, id="login-page"),
    pytest.param(admin_login, id="admin-login"),
    pytest.param(token_login, id="token"),
]


def assert_throttled(response: Any) -> None:
    assert response.status_code == 429
    assert response.json()["code"] == "login-throttled"
    assert int(response["Retry-After"]) > 0


def assert_not_logged_in(client: Client, response: Any) -> None:
    assert "_auth_user_id" not in client.session  # no session
    assert "token" not in response.json()  # no token handed out


@pytest.mark.parametrize("login", LOGINS)
def test_past_the_limit_per_address_even_the_right_password_is_429(login):
    user = new_user(is_staff=True)
    address, client = new_address(), Client()
    for _ in range(LIMIT):  # guesses at other accounts, from one address
        login(client, f"someone-{uuid.uuid4().hex[:8]}", "wrong-guess", address)

    response = login(client, user.username, DEFAULT_PASSWORD, address)

    assert_throttled(response)
    assert_not_logged_in(client, response)


@pytest.mark.parametrize("login", LOGINS)
def test_past_the_limit_per_username_other_addresses_do_not_help(login):
    user = new_user(is_staff=True)
    client = Client()
    for _ in range(LIMIT):  # one guess from each of many addresses
        login(client, user.username, "wrong-guess", new_address())

    response = login(client, user.username.upper(), DEFAULT_PASSWORD, new_address())

    assert_throttled(response)
    assert_not_logged_in(client, response)


def test_within_the_limits_a_login_works():
    user = new_user()

    response = token_login(Client(), user.username, DEFAULT_PASSWORD, new_address())

    assert response.status_code == 200
    assert response.json()["token"] == Token.objects.get(user=user).key


def test_a_client_supplied_forwarded_for_does_not_reset_the_count():
    address, client = new_address(), Client()
    for index in range(LIMIT):
        page_login(client, f"u{index}-{uuid.uuid4().hex[:8]}", "x", address)

    response = client.post(
        "/login/",
        {"username": f"fresh-{uuid.uuid4().hex[:8]}", "password": "x"},
        REMOTE_ADDR=address,
        HTTP_X_FORWARDED_FOR=new_address(),
    )

    assert_throttled(response)


# --- Client address ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "1.1.1.1", "9.9.9.9"),  # no trusted proxy: the header is the client's claim
        (1, "1.1.1.1", "1.1.1.1"),
        (1, "6.6.6.6, 1.1.1.1", "1.1.1.1"),  # the client's own entry is left of ours
        (2, "6.6.6.6, 1.1.1.1, 2.2.2.2", "1.1.1.1"),
        (2, "1.1.1.1", "9.9.9.9"),  # fewer hops than proxies: only the peer is known
        (1, "", "9.9.9.9"),
    ],
)
def test_the_client_address_believes_only_the_trusted_proxies(
    settings, proxies, forwarded, expected
):
    settings.TRUSTED_PROXY_COUNT = proxies
    request = RequestFactory().get("/", REMOTE_ADDR="9.9.9.9", HTTP_X_FORWARDED_FOR=forwarded)

    assert client_address(request) == expected


def test_the_anonymous_api_throttle_keys_on_the_address_not_on_forwarded_for():
    address = new_address()
    throttle = UserRateThrottle()
    request = RequestFactory().get("/", REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR="1.2.3.4")
    request.user = type("Anonymous", (), {"is_authenticated": False, "pk": None})()

    assert throttle.get_cache_key(request, None) == f"throttle:user:{address}"


# --- Passwords ---------------------------------------------------------------------


@pytest.mark.parametrize("password", ["password123", "12345678901", "short1"])
def test_weak_passwords_are_refused(password):
    with pytest.raises(ValidationError):
        validate_password(password, user=User(username="carol"))


@pytest.mark.parametrize(("username", "password", "_staff"), DEMO_USERS)
def test_the_demo_passwords_pass_every_validator(username, password, _staff):
    validate_password(password, user=User(username=username))
