"""Every error the shop can shape is problem+json, including the ones Django and
gunicorn would answer with an HTML page: a path no URL matches under /api/, a 405
from a Django view, a body whose Content-Type names no concrete type, a request
line or header field past the limits (edge/http_limits.py)."""

from __future__ import annotations

import json
from http.client import HTTPConnection
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from edge.errors import PROBLEM_CONTENT_TYPE
from edge.http_limits import (
    GUNICORN_LIMIT_REQUEST_FIELD_SIZE,
    GUNICORN_LIMIT_REQUEST_FIELDS,
    GUNICORN_LIMIT_REQUEST_LINE,
    MAX_HEADER_FIELD_CHARS,
    MAX_HEADER_FIELDS,
    MAX_REQUEST_TARGET_CHARS,
)
from orders.models import Order
from tests.processes import child_database_url
from tools.bench.appserver import HOST, app_env, gunicorn

pytestmark = pytest.mark.django_db


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
    body = json.loads(response.content)
    assert body["code"] == code
    assert body["status"] == status
    assert body["type"] == f"/problems/{code}"
    return body


@pytest.mark.parametrize(
    "path",
    ["/api/", "/api", "/api/v2/orders/", "/api/v1/no-such-thing/", "/api/v1/orders/1/x/y/"],
)
def test_a_path_no_url_matches_under_the_api_is_a_problem(path):
    assert_problem(Client().get(path), 404, "not-found")


def test_a_path_no_url_matches_under_the_sandbox_api_is_a_problem():
    assert_problem(Client().post("/sandbox/v1/no-such-thing"), 404, "not-found")


def test_a_page_no_url_matches_is_still_a_page():
    response = Client().get("/no-such-page/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("post", "/api/schema/", "GET"),  # rendered as YAML otherwise
        ("put", "/api/docs/", "GET"),  # rendered as an HTML template otherwise
        ("post", "/problems/", "GET"),  # Django's require_GET: an empty body otherwise
        ("get", "/logout/", "POST"),
        ("get", "/orders/1/pay/", "POST"),
    ],
)
def test_a_method_the_view_does_not_take_is_a_problem_with_allow(method, path, allowed):
    response = getattr(Client(), method)(path)

    assert_problem(response, 405, "method-not-allowed")
    assert allowed in response["Allow"]


@pytest.mark.parametrize("content_type", ["*/*", "application/*", "*/json", "text/plain"])
@pytest.mark.parametrize("path", ["/api/v1/orders/", "/api/v1/auth/token/"])
def test_a_body_without_a_concrete_json_type_is_415(client, product, content_type, path):
    body = json.dumps({"lines": [{"sku": product.sku, "quantity": 1}]})

    response = client.post(path, body, content_type=content_type, HTTP_IDEMPOTENCY_KEY="k-415")

    assert_problem(response, 415, "unsupported-media-type")
    assert Order.objects.count() == 0


# --- The request head: the shop's limits, below gunicorn's ---------------------------

LONG_TARGET = "/api/v1/products/?q=" + "x" * MAX_REQUEST_TARGET_CHARS
LONG_FIELD = "x" * MAX_HEADER_FIELD_CHARS
MANY_FIELDS = {f"X-Field-{n}": "1" for n in range(MAX_HEADER_FIELDS + 1)}


def test_the_shops_limits_are_below_gunicorns():
    # Each with room for what gunicorn counts besides: the method and the protocol,
    # the header's name, fields that the WSGI environ merges.
    assert MAX_REQUEST_TARGET_CHARS + len("OPTIONS  HTTP/1.1") < GUNICORN_LIMIT_REQUEST_LINE
    assert MAX_HEADER_FIELD_CHARS + 100 < GUNICORN_LIMIT_REQUEST_FIELD_SIZE
    assert MAX_HEADER_FIELDS + 20 < GUNICORN_LIMIT_REQUEST_FIELDS


def test_a_target_past_the_limit_is_414():
    assert_problem(Client().get(LONG_TARGET), 414, "uri-too-long")


def test_a_target_at_the_limit_is_served():
    target = LONG_TARGET[:MAX_REQUEST_TARGET_CHARS]

    assert Client().get(target).status_code == 200


def test_a_header_field_past_the_limit_is_431():
    assert_problem(
        Client().get("/api/v1/products/", HTTP_X_LONG=LONG_FIELD), 431, "header-fields-too-large"
    )


def test_too_many_header_fields_is_431():
    response = Client().get("/api/v1/products/", headers=MANY_FIELDS)

    assert_problem(response, 431, "header-fields-too-large")


def _send(port: int, target: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    conn = HTTPConnection(HOST, port, timeout=30)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_through_gunicorn_the_shop_answers_a_head_too_large_not_gunicorn(tmp_path):
    env = app_env(database_url=child_database_url(), redis_url=settings.REDIS_URL)

    with gunicorn(name="head-limits", env=env, log_dir=tmp_path) as server:
        answers = {
            "target": _send(server.port, LONG_TARGET, {}),
            "field": _send(server.port, "/api/v1/products/", {"X-Long": LONG_FIELD}),
            "fields": _send(server.port, "/api/v1/products/", MANY_FIELDS),
            "fine": _send(server.port, LONG_TARGET[:MAX_REQUEST_TARGET_CHARS], {"X-Ok": "1"}),
        }

    expected = {"target": (414, "uri-too-long"), "field": (431, "header-fields-too-large")}
    expected["fields"] = (431, "header-fields-too-large")
    for name, (status, code) in expected.items():
        got_status, content_type, body = answers[name]
        assert (got_status, content_type) == (status, PROBLEM_CONTENT_TYPE), (name, body[:200])
        assert json.loads(body)["code"] == code
    assert answers["fine"][0] == 200, answers["fine"]
