"""The story's requests, sent through the project's published client (``onceshop_client``).

The story plays the clients of the reading (a customer's page, a gateway, the
provider's operator), so it talks to the shop the way a user of OnceShop would
write a client: with ``OnceShopClient``, and reads each answer as it came off
the wire (status, body, ``Idempotent-Replayed``).

Two ways of sending:

- a scripted step of the reading (a click, the double click, the gateway's
  retry three seconds later) is ONE request: ``ONE_SHOT`` turns the client's
  own retries off, because the story itself plays the retries it tells;
- where a client simply calls the API (the second chapter's customer), the
  client's default policy decides: it would retry a 503 or a 409 in use with
  the same key, and never retries another 4xx.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext

from demo.shop.answers import Answer
from demo.shop.client import CONNECT_TIMEOUT_S, read_timeout_s
from demo.shop.story.report import StoryUnavailable
from onceshop_client import GaveUp, OnceShopClient, Problem, Reply, RetryPolicy

ONE_SHOT = RetryPolicy(max_attempts=1)


def client(
    base_url: str, *, token: str | None = None, policy: RetryPolicy = ONE_SHOT
) -> OnceShopClient:
    """A client of ``base_url``; one per thread (it keeps a requests.Session)."""
    # The read timeout outlasts a pay that waits on the provider's whole timeout
    # before answering 503: the client must hear the shop's answer, not guess.
    return OnceShopClient(
        base_url, token=token, policy=policy, timeout=(CONNECT_TIMEOUT_S, read_timeout_s())
    )


def answer_of(reply: Reply[Any]) -> Answer:
    return Answer.from_http(status=reply.status, headers=reply.headers, body=reply.body)


def send(request: Callable[[], Reply[Any]], *, who: str, where: str) -> Answer:
    """Run one client call and return its answer, final or not, as the story shows it.

    A ``Problem`` (a final 4xx) and a retryable answer the client gave up on are
    answers too; only no answer at all stops the story, saying where it looked.
    """
    try:
        return answer_of(request())
    except Problem as final:
        return answer_of(final.reply)
    except GaveUp as gave_up:
        if gave_up.last_reply is not None:
            return answer_of(gave_up.last_reply)
        error = type(gave_up.last_error).__name__
        raise StoryUnavailable(
            gettext(
                "The %(who)s at %(where)s is not reachable (%(error)s). Start it with `make "
                "demo` (and run the story with the same PORT), or point SHOP_BASE_URL / "
                "PROVIDER_BASE_URL at it."
            )
            % {"who": gettext(who), "where": where, "error": error}
        ) from gave_up
