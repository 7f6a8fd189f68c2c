"""Schemathesis over /api/schema/, in process against the WSGI application.

- Every operation of the published schema, as an anonymous client, a customer
  and staff, with schema-valid and schema-violating data (a missing or
  malformed ``Idempotency-Key`` among it: the header is required, so the
  negative cases and ``missing_required_header`` leave it out or garble it).
- A stateful run that follows the schema's links (an order's ``number`` into
  its detail, pay and cancel, the request's key into the key's status), with
  the sandbox provider serving for real, so pay reaches a provider.

Checks: every one Schemathesis has, plus ours (every error is problem+json with
a ``code``), except what ``EXCLUDED`` names, each with its reason. Where a
schema-valid request is refused for a business reason the schema cannot
express, the operation's expected statuses say so (``ACCEPTABLE_REFUSALS``).

Bounded for CI (``MAX_EXAMPLES`` per operation and caller); a deep run (tens of
thousands of requests) is ``.venv/bin/schemathesis run http://127.0.0.1:8000/api/schema/``
against ``make demo``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from hypothesis import HealthCheck, settings

from config.wsgi import application
from edge.errors import PROBLEM_CONTENT_TYPE
from orders.models import Order
from payments.models import Payment
from tests.factories import ProductFactory, UserFactory

MAX_EXAMPLES = 10
# Derandomized: CI reruns the same examples for the same schema, so a finding is
# reproducible, never a coin toss between runs. The deep run below explores.
HYPOTHESIS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Schema-valid requests the server rightly refuses, by operation: the schema cannot
# list the catalogue, know a password, or sign a notification.
ACCEPTABLE_REFUSALS = {
    "/api/v1/auth/token/": ["400"],  # credentials that are not anyone's
    "/api/v1/callbacks/sandbox/": ["400"],  # a signature Schemathesis cannot compute
    "/api/v1/callbacks/stripe/": ["400"],  # the same, for Stripe's
    "/api/v1/orders/": ["400", "422"],  # unknown or repeated SKUs; a key reused for another body
    "/api/v1/orders/{number}/pay/": ["402", "422"],  # declined; key reused for another order
    "/api/v1/orders/{number}/cancel/": ["422"],
    "/api/v1/orders/{number}/refunds/": ["402", "422"],  # declined; key reused for another body
}
_DEFAULT_ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]

CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"max-examples": MAX_EXAMPLES, "mode": "all"},
        "phases": {"stateful": {"max-steps": 6}},
        "operations": [
            {
                "include-path": path,
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": _DEFAULT_ACCEPTED + extra}
                },
            }
            for path, extra in ACCEPTABLE_REFUSALS.items()
        ],
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/", application, config=CONFIG)

# Checks switched off, each with its reason; every other check Schemathesis has is on.
# (``max_response_time`` is off by default: it needs a limit, and a wall-clock limit
# on a loaded 2-core CI machine would only measure the machine.)
EXCLUDED: list[Any] = []


def errors_are_problem_json(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx is RFC 9457 problem+json with a stable ``code`` (docs/design.md)."""
    if response.status_code < 400:
        return None
    headers = {name.lower(): values for name, values in response.headers.items()}
    content_type = headers.get("content-type", [""])[0]
    assert content_type.split(";")[0] == PROBLEM_CONTENT_TYPE, content_type
    body = json.loads(response.content)
    assert isinstance(body.get("code"), str), body
    assert body.get("status") == response.status_code, body
    return True


def auth_headers(user: User | None) -> dict[str, str]:
    return {} if user is None else {"Authorization": f"Token {user.auth_token.key}"}


@pytest.fixture
def callers(db: Any, settings: Any, wsgi_in_test_transaction: None) -> dict[str, dict[str, str]]:
    """Headers for each kind of caller, and a catalogue to order from."""
    # Generated order numbers never exist, so pay never gets as far as the provider
    # here; if it did, it would be refused at once (nothing listens there).
    settings.PROVIDER_BASE_URL = "http://127.0.0.1:9/sandbox"
    # Every generated login checks a password: the deployment's hasher costs ~0.3 s a
    # check by design, which here would only measure PBKDF2.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    ProductFactory.create_batch(3, stock=1000)
    return {
        "anonymous": {},
        "customer": auth_headers(UserFactory.create()),
        "staff": auth_headers(UserFactory.create(is_staff=True)),
    }


@schema.parametrize()
@HYPOTHESIS
def test_every_operation_answers_as_documented(case, callers):
    # The same generated request from each kind of caller: anonymous, customer, staff.
    for headers in callers.values():
        case.call_and_validate(
            headers={**(case.headers or {}), **headers},
            additional_checks=[errors_are_problem_json],
            excluded_checks=EXCLUDED,
        )


Workflow = schema.as_state_machine()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("is_staff", [False, True], ids=["customer", "staff"])
def test_stateful_runs_follow_the_links_and_answer_as_documented(sandbox, is_staff):
    # Given a catalogue, and a customer (or a member of staff, who may also add
    # products) whose every call the workflow makes. An anonymous caller has no
    # link to follow (every call is a 401): the per-operation run covers it.
    skus = [product.sku for product in ProductFactory.create_batch(3, stock=10_000)]
    customer = auth_headers(UserFactory.create(is_staff=is_staff))

    class CustomerWorkflow(Workflow):  # type: ignore[misc, valid-type]
        def before_call(self, case: Any) -> None:
            # Generated SKUs name nothing, so no order would ever be made and no link
            # followed: a well-formed order is made to name the catalogue's products.
            positive = case.meta is not None and case.meta.generation.mode.is_positive
            lines = case.body.get("lines") if isinstance(case.body, dict) else None
            is_order = case.operation.path == "/api/v1/orders/" and case.method == "POST"
            if is_order and positive and isinstance(lines, list):
                case.body["lines"] = [
                    {**line, "sku": sku}
                    for line, sku in zip(lines, skus, strict=False)
                    if isinstance(line, dict)
                ]

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": customer}

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            # ``headers``: the auth checks must know these credentials were ours, not
            # generated (they then probe without them and expect a 401).
            case.validate_response(
                response,
                additional_checks=[errors_are_problem_json],
                excluded_checks=EXCLUDED,
                headers=customer,
                transport_kwargs=kwargs,
                recorder=self.recorder,
            )

    # Fewer scenarios than the per-operation runs: each one is several requests, and
    # pay goes through the real provider over HTTP.
    CustomerWorkflow.run(settings=settings(HYPOTHESIS, max_examples=4))

    # Then it did get past the catalogue: orders were made, and links followed to pay
    assert Order.objects.exists()
    assert Payment.objects.exists()
