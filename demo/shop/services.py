"""What the pages' forms do: check out and pay, through the API's own flows and core.

A page is one more client of the idempotency layer, not a second implementation
of it. Each submit builds the same ``KeyRequest`` the API would build for the
same action (same method, same API route, same body), and runs the same flow
(``order_create_flow``, ``order_pay_flow``) through ``idempotency.core.execute``.
So a key used on a page and the same key sent to the API are one request: the
second replays the first, whichever came first.

The checkout adds the entry gate of docs/design.md ("Background work"): the form carries a
one-time token the server issued, and submitting consumes it atomically.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Sequence

from django.conf import settings
from django.urls import reverse

from demo.shop.answers import Answer
from demo.shop.errors import CheckoutTokenInvalid, CheckoutUnavailable
from edge.handler import as_application_error
from edge.redis import REDIS_DOWN, redis_client
from idempotency.core import KeyRequest, execute
from idempotency.drf import parse_idempotency_key
from idempotency.models import IdempotencyKey
from observability.metrics.instruments import observe_redis_unavailable
from orders.flows import order_create_flow
from orders.services import LineRequest
from payments.flows import order_pay_flow
from payments.providers import get_provider
from payments.refund_flows import order_refund_flow
from payments.refunds import RefundRequest

# A checkout form is good for this long after it was shown: ample to choose a few
# items, short enough that abandoned tokens leave Redis on their own (EX), so the
# gate needs no reaper of its own.
CHECKOUT_TOKEN_TTL_S = 30 * 60
# 32 random bytes from the OS's CSPRNG, URL-safe base64: 256 bits nobody can guess
# or enumerate (never a timestamp or a counter), and every character is allowed in
# an Idempotency-Key, so the token can be the key as it is.
CHECKOUT_TOKEN_BYTES = 32


def _token_key(*, session_key: str, token: str) -> str:
    # The session is part of the name: a token is only ever found by the session it
    # was issued to. Logging in again rotates the session key, so forms shown before
    # stop working (a stale session gets the "expired" message, never someone's order).
    return f"checkout-token:{session_key}:{token}"


def _receipt_key(*, session_key: str, token: str) -> str:
    return f"checkout-token-used:{session_key}:{token}"


def _issued_key(*, session_key: str) -> str:
    return f"checkout-tokens:{session_key}"


# One script, so one atomic step: store the token (NX, with its expiry), append it to
# the session's list of live tokens, and evict the oldest past the cap. A page
# reloaded a thousand times thus holds at most CHECKOUT_TOKENS_PER_SESSION tokens in
# Redis, and the list expires with the newest token it names.
_ISSUE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return -1
end
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local evicted = 0
while redis.call('LLEN', KEYS[2]) > tonumber(ARGV[4]) do
  redis.call('DEL', ARGV[5] .. redis.call('LPOP', KEYS[2]))
  evicted = evicted + 1
end
return evicted
"""


def checkout_token_issue(*, session_key: str, user_id: int) -> str:
    """A new one-time token for one checkout form (one checkout intent).

    At most CHECKOUT_TOKENS_PER_SESSION live per session: a new one evicts the
    oldest, whose form then answers ``checkout-token-invalid`` (nothing ordered).
    """
    token = secrets.token_urlsafe(CHECKOUT_TOKEN_BYTES)
    try:
        # SET NX EX in ONE command: the expiry can never be missing (SETNX followed by
        # EXPIRE leaves an immortal key if the process dies between them), and NX
        # never overwrites a token that somehow exists already.
        evicted = redis_client().eval(
            _ISSUE,
            2,
            _token_key(session_key=session_key, token=token),
            _issued_key(session_key=session_key),
            str(user_id),
            CHECKOUT_TOKEN_TTL_S,
            token,
            max(1, settings.CHECKOUT_TOKENS_PER_SESSION),
            _token_key(session_key=session_key, token=""),
        )
    except REDIS_DOWN as error:  # a script error or a wrong type is a bug: it raises
        observe_redis_unavailable(use="checkout-token")
        raise CheckoutUnavailable() from error
    if evicted == -1:  # 256 random bits collided: a broken RNG, not bad luck
        raise RuntimeError("checkout token collision")
    return token


class TokenState(enum.Enum):
    TAKEN = "taken"  # this submit consumed the token
    ALREADY_TAKEN = "already_taken"  # an earlier or concurrent submit of the form did
    UNKNOWN = "unknown"  # never issued to this session and user, or expired unused


# GETDEL takes the token: of any number of submits, exactly one gets it. In the same
# script, so in the same atomic step, it leaves a receipt saying the token was real
# and is spent. Without the receipt, a submit arriving between the first one's GETDEL
# and its database INSERT would find neither token nor record, and would wrongly
# call a genuine form "expired". (GET followed by DEL instead of GETDEL would let two
# submits both read the token before either deleted it.)
_CONSUME = """
local owner = redis.call('GETDEL', KEYS[1])
if owner then
  redis.call('SET', KEYS[2], owner, 'EX', ARGV[1])
  return {1, owner}
end
return {0, redis.call('GET', KEYS[2])}
"""


def checkout_token_consume(*, session_key: str, user_id: int, token: str) -> TokenState:
    """Take the token if this session holds it; otherwise say whether it was spent."""
    keys = [
        _token_key(session_key=session_key, token=token),
        _receipt_key(session_key=session_key, token=token),
    ]
    try:
        # The receipt lives as long as a token may: after that, the key's record in the
        # database (kept IDEMPOTENCY_KEY_TTL) still replays a reload of the form.
        taken, owner = redis_client().eval(_CONSUME, 2, *keys, CHECKOUT_TOKEN_TTL_S)
    except REDIS_DOWN as error:  # a script error or a wrong type is a bug: it raises
        observe_redis_unavailable(use="checkout-token")
        raise CheckoutUnavailable() from error
    if owner is None or owner.decode() != str(user_id):
        return TokenState.UNKNOWN
    return TokenState.TAKEN if taken else TokenState.ALREADY_TAKEN


def order_request_body(lines: Sequence[LineRequest]) -> dict[str, object]:
    """The body the API's POST /api/v1/orders/ takes, so the fingerprints agree."""
    return {"lines": [{"sku": line.sku, "quantity": line.quantity} for line in lines]}


def _run(request: KeyRequest, flow: Callable[[IdempotencyKey], None]) -> Answer:
    """``IdempotentApi.idempotent`` plus the API's exception handler, for a page."""
    try:
        return Answer.from_outcome(execute(request, flow))
    except Exception as error:
        # The same mapping the API's exception handler applies: domain errors keep
        # their status and code; anything unknown is logged and becomes a 500.
        return Answer.from_error(as_application_error(error, keyed=True))


def _refuse(record: IdempotencyKey) -> None:
    raise CheckoutTokenInvalid()


def checkout_submit(
    *, user_id: int, session_key: str, token: str, lines: Sequence[LineRequest]
) -> Answer:
    """Create the order once per checkout form, whatever the number of submits.

    The token is the order's Idempotency-Key. The first submit takes the token and
    runs the order flow. A later submit of the same form finds it spent, and goes
    through the SAME core with the SAME key, so it cannot make a second order:

    - the first submit finished: its stored answer, replayed;
    - the first is still running: our INSERT of the key's record waits on the
      unique (user, key) index until the first commits, then the core replays it;
    - the same form with other items: 422 ``idempotency-key-mismatch``.

    A token this session was never given (forged), or one that expired unused, is
    refused: the core runs a flow that only raises (``_refuse``), which still
    replays a stored answer if the key has one (a reload long after the first
    submit) and otherwise rolls back, storing nothing.
    """
    request = KeyRequest(
        user_id=user_id,
        key=token,
        method="POST",
        path=reverse("order-list"),  # the API's route: same request, same fingerprint
        body=order_request_body(lines),
    )
    try:
        state = checkout_token_consume(session_key=session_key, user_id=user_id, token=token)
    except CheckoutUnavailable as error:
        return Answer.from_error(error)
    if state is TokenState.UNKNOWN:
        return _run(request, _refuse)
    return _run(request, lambda record: order_create_flow(record, user_id=user_id, lines=lines))


def pay_key_new() -> str:
    """The Idempotency-Key of one pay intent, put in the order page's form."""
    return secrets.token_urlsafe(CHECKOUT_TOKEN_BYTES)


def order_pay_submit(*, user_id: int, order_number: str, key: str) -> Answer:
    """Pay the order under ``key``: the API's pay flow, the API's request shape."""
    try:
        key = parse_idempotency_key(key)  # a tampered hidden field: 400, said in words
    except Exception as error:
        return Answer.from_error(as_application_error(error))
    request = KeyRequest(
        user_id=user_id,
        key=key,
        method="POST",
        path=reverse("order-pay", kwargs={"number": order_number}),
        body={},  # what the API's empty body parses to, so a page key replays there too
    )
    provider = get_provider()
    return _run(
        request,
        lambda record: order_pay_flow(
            record, user_id=user_id, order_number=order_number, provider=provider
        ),
    )


def order_refund_submit(
    *, user_id: int, order_number: str, key: str, amount: int | None, reason: str
) -> Answer:
    """Refund the order under ``key``: the API's refund flow, the API's request shape."""
    try:
        key = parse_idempotency_key(key)  # a tampered hidden field: 400, said in words
    except Exception as error:
        return Answer.from_error(as_application_error(error))
    body: dict[str, object] = {"reason": reason}
    if amount is not None:
        body["amount"] = amount
    request = KeyRequest(
        user_id=user_id,
        key=key,
        method="POST",
        path=reverse("order-refund", kwargs={"number": order_number}),
        body=body,  # what the API would parse, so a page key replays there too
    )
    refund = RefundRequest(
        user_id=user_id, is_staff=False, order_number=order_number, amount=amount, reason=reason
    )
    provider = get_provider()
    return _run(
        request, lambda record: order_refund_flow(record, request=refund, provider=provider)
    )
