"""Each of Redis's other uses without it (docs/design.md, "Redis down"): never a 500.

An order page's answer history degrades (the page renders, the payment stands),
a heartbeat is skipped after the work it records, the readiness probe says
``redis unreachable``, the demo's redelivery panel answers 503 with
``Retry-After``. Each is counted in ``onceshop_redis_unavailable_total{use}``.
"Down" is exactly ``edge.redis.REDIS_DOWN``, the socket closed under a reader
included; any other Redis error (a script's, a wrong type) is a bug and raises.
The Redis is the test's own, really stopped, or frozen with its socket closed.
"""

from __future__ import annotations

import logging

import pytest
import redis
from django.test import Client

from demo.shop.answers import Answer
from demo.shop.history import answer_history, answer_record
from demo.shop.services import checkout_token_consume, checkout_token_issue
from edge.redis import redis_client
from observability import heartbeats
from observability.health import readiness
from operations.audit.run import audit_run
from orders.models import Order
from tests.factories import UserFactory
from tests.redis_servers import close_under_reader, unavailable

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = Answer(status=200, replayed=False, body={"status": "PAID"})


def test_closing_the_socket_under_a_reader_raises_redis_pys_value_error(redis_server):
    # What the chaos run met while Redis restarted: not a ConnectionError
    with pytest.raises(ValueError, match="closed file"):
        close_under_reader(redis_server, lambda: redis_client().lrange("anything", 0, -1))


def test_the_answer_history_degrades_when_the_socket_closes_under_it(redis_server):
    before = unavailable("answer-history")

    read = close_under_reader(redis_server, lambda: answer_history(user_id=1, number="O-1"))
    written = close_under_reader(
        redis_server,
        lambda: answer_record(user_id=1, number="O-1", label="Pay", answer=ANSWER, key="k"),
    )

    assert read == []
    assert (written.status, written.label) == (200, "Pay")  # the answer is still shown
    assert unavailable("answer-history") - before == 2


def test_the_pay_page_pays_and_renders_without_the_answer_history(
    redis_stopped, user, order, sandbox
):
    web = Client()
    web.force_login(user)
    before = unavailable("answer-history")

    page = web.get(f"/orders/{order.number}/")
    paid = web.post(f"/orders/{order.number}/pay/", {"idempotency_key": page.context["pay_key"]})

    assert page.status_code == 200, page.content
    assert paid.status_code == 200, paid.content
    assert paid.context["answer"].status == 200
    assert Order.objects.get(pk=order.pk).status == "PAID"
    # the page's read, the pay's record, and the re-rendered page's read
    assert unavailable("answer-history") - before == 3


def test_a_heartbeat_is_skipped_logged_and_counted_when_the_socket_closes(redis_server, caplog):
    before = unavailable("heartbeat")

    with caplog.at_level(logging.WARNING, logger="observability.heartbeats"):
        close_under_reader(redis_server, lambda: heartbeats.audit_finished(findings=3))
        close_under_reader(redis_server, lambda: heartbeats.job_succeeded(job="payments"))

    assert unavailable("heartbeat") - before == 2
    assert caplog.text.count("heartbeat not recorded: redis ValueError") == 2


def test_the_audit_finishes_its_work_with_redis_stopped(redis_stopped):
    before = unavailable("heartbeat")

    result = audit_run()  # the books are checked; only the heartbeat is missing

    assert result.findings == []
    assert unavailable("heartbeat") - before == 1


def test_readiness_says_redis_unreachable_when_the_socket_closes_under_the_ping(redis_server):
    checks = close_under_reader(redis_server, readiness)

    assert checks == {"database": "ok", "redis": "unreachable"}


@pytest.fixture
def staff_web(settings) -> Client:
    settings.DEMO_MODE = True
    web = Client()
    web.force_login(UserFactory.create(username="staff", is_staff=True))
    return web


def test_the_redelivery_demo_answers_503_with_retry_after_without_redis(redis_stopped, staff_web):
    before = unavailable("redelivery")

    started = staff_web.post("/chaos/redelivery/")
    followed = staff_web.get("/chaos/?run=0123abcd")
    killed = staff_web.post("/chaos/redelivery/0123abcd/kill/")

    for response in (started, followed, killed):
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == "5"
        assert response["Content-Type"].startswith("text/html")
        assert "Redis" in response.content.decode()
    assert unavailable("redelivery") - before == 3


def test_the_chaos_panel_without_a_run_needs_no_redis(redis_stopped, staff_web):
    assert staff_web.get("/chaos/").status_code == 200


def test_a_wrong_type_in_the_checkout_tokens_is_a_bug_not_redis_down(redis_server):
    # A script error is not an outage: it must be seen (a 500), not ridden as a 503
    client = redis.Redis.from_url(redis_server.url)
    client.set("checkout-tokens:s1", "not a list")
    client.rpush("checkout-token:s1:t1", "not a string")
    before = unavailable("checkout-token")

    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        checkout_token_issue(session_key="s1", user_id=1)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        checkout_token_consume(session_key="s1", user_id=1, token="t1")
    assert unavailable("checkout-token") == before
