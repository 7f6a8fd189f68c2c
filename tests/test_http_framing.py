"""Issue 11: methods and body framing are answered before any key or body is looked at.

- PUT/PATCH/DELETE on an unsafe endpoint is 405 ``method-not-allowed``, not
  400 ``idempotency-key-missing``: no key can make an unsupported method work.
- A body without ``Content-Length`` (``Transfer-Encoding: chunked``) is read
  whole when the server says the stream ends (``wsgi.input_terminated``, as
  gunicorn does), under the same 413 limit; otherwise it is refused with 411
  ``length-required``. Never read as empty.
"""

import io
import json
from http.client import HTTPConnection
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from django.conf import settings

from config.wsgi import application
from idempotency.models import IdempotencyKey
from orders.models import Order, Product
from tests.conftest import new_key
from tests.factories import ProductFactory, UserFactory
from tests.processes import child_database_url
from tools.bench.appserver import HOST, app_env, gunicorn

UNSAFE = ["/api/v1/orders/", "/api/v1/orders/{number}/pay/", "/api/v1/orders/{number}/cancel/"]


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["put", "patch", "delete"])
@pytest.mark.parametrize("path", UNSAFE)
def test_an_unsupported_method_is_405_before_any_key_check(client, order, method, path):
    response = getattr(client, method)(path.format(number=order.number))

    assert response.status_code == 405
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "method-not-allowed"
    assert "POST" in response["Allow"]


# --- Bodies without Content-Length, through the WSGI application itself -----------------


@pytest.fixture
def wsgi(wsgi_in_test_transaction: None) -> Any:
    """Call ``config.wsgi.application`` with a hand-made environ, in the test's transaction."""

    def call(path: str, body: bytes, headers: dict[str, str], *, terminated: bool) -> Any:
        environ: dict[str, Any] = {}
        setup_testing_defaults(environ)
        environ.update(
            {
                "REQUEST_METHOD": "POST",
                "PATH_INFO": path,
                "CONTENT_TYPE": "application/json",
                "HTTP_TRANSFER_ENCODING": "chunked",
                "wsgi.input": io.BytesIO(body),
                "wsgi.input_terminated": terminated,
            }
        )
        environ.pop("CONTENT_LENGTH", None)
        for name, value in headers.items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        answer: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]], *_: Any) -> Any:
            answer["status"] = int(status.split()[0])
            answer["headers"] = dict(response_headers)

        chunks = application(environ, start_response)
        try:
            answer["body"] = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
        return answer

    return call


def _order_body(product: Product) -> bytes:
    return json.dumps({"lines": [{"sku": product.sku, "quantity": 1}]}).encode()


@pytest.mark.django_db
def test_a_chunked_body_from_a_terminated_stream_is_read_whole(wsgi, user, product):
    headers = {"Authorization": f"Token {user.auth_token.key}", "Idempotency-Key": new_key()}

    answer = wsgi("/api/v1/orders/", _order_body(product), headers, terminated=True)

    assert answer["status"] == 201, answer["body"]
    assert Order.objects.get().lines.get().sku == product.sku


@pytest.mark.django_db
def test_a_chunked_body_without_an_end_of_stream_signal_is_411(wsgi, user, product):
    headers = {"Authorization": f"Token {user.auth_token.key}", "Idempotency-Key": new_key()}

    answer = wsgi("/api/v1/orders/", _order_body(product), headers, terminated=False)

    assert answer["status"] == 411
    assert answer["headers"]["Content-Type"] == "application/problem+json"
    assert json.loads(answer["body"])["code"] == "length-required"
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


@pytest.mark.django_db
def test_a_chunked_body_over_the_limit_is_413(wsgi, user, product):
    headers = {"Authorization": f"Token {user.auth_token.key}", "Idempotency-Key": new_key()}
    padding = "x" * (settings.API_MAX_BODY_BYTES + 10)
    body = json.dumps({"lines": [{"sku": product.sku, "quantity": 1}], "pad": padding}).encode()

    answer = wsgi("/api/v1/orders/", body, headers, terminated=True)

    assert answer["status"] == 413
    assert json.loads(answer["body"])["code"] == "payload-too-large"
    assert Order.objects.count() == 0


# --- The same through a real gunicorn --------------------------------------------------


def _chunked_request(port: int, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
    """POST ``body`` in 1 KiB chunks (no Content-Length); return (status, JSON body)."""
    chunks = (body[i : i + 1024] for i in range(0, len(body), 1024))
    conn = HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request(
            "POST",
            path,
            body=chunks,
            headers={**headers, "Content-Type": "application/json"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_gunicorn_reads_a_chunked_order_whole_and_applies_the_413(tmp_path):
    user = UserFactory.create()
    product = ProductFactory.create(stock=5)
    env = app_env(database_url=child_database_url(), redis_url=settings.REDIS_URL)
    auth = {"Authorization": f"Token {user.auth_token.key}"}

    with gunicorn(name="chunked", env=env, log_dir=tmp_path) as server:
        created = _chunked_request(
            server.port,
            "/api/v1/orders/",
            {**auth, "Idempotency-Key": new_key()},
            _order_body(product),
        )
        big = json.dumps({"lines": [], "pad": "x" * 70_000}).encode()
        too_big = _chunked_request(
            server.port, "/api/v1/orders/", {**auth, "Idempotency-Key": new_key()}, big
        )

    assert created[0] == 201, created
    assert created[1]["lines"][0]["sku"] == product.sku
    assert too_big[0] == 413, too_big
    assert too_big[1]["code"] == "payload-too-large"
    assert Order.objects.count() == 1
