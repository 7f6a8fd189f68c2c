"""What one request got, and what that means, in words.

The order page, the checkout, the chaos panel and the story all show answers
"as they happened": the HTTP status, fresh or replayed (``Idempotent-Replayed``),
the problem's ``code``, and a sentence saying why. An ``Answer`` is built the
same way whether the request ran in this process (``from_outcome`` /
``from_error``, the pages) or went over HTTP (``from_http``, chaos and story),
so every screen explains an answer with the same words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from django.utils.translation import gettext, gettext_noop

from demo.shop.errors import CheckoutTokenInvalid, CheckoutUnavailable
from edge.errors import ApplicationError, ConcurrentUpdate, InternalError, LockTimeout
from idempotency.core import Outcome
from idempotency.drf import REPLAYED_HEADER
from idempotency.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyInvalid,
    IdempotencyKeyMismatch,
    IdempotencyKeyMissing,
)
from orders.errors import OrderKeyReused, OrderNotCancellable, OutOfStock, UnknownSku
from payments.errors import (
    OrderNotPayable,
    PaymentActionRequired,
    PaymentDeclined,
    PaymentFailed,
    PaymentOutcomeUnknown,
)

# The answers after which the right move is the SAME key again, later (docs/design.md,
# "Behaviour matrix"):
# the first request is still running, or nobody knows yet what happened. Every
# other error is final for its key: a new attempt needs a new key.
RETRY_SAME_KEY = frozenset(
    {
        IdempotencyKeyInUse.code,
        PaymentOutcomeUnknown.code,
        PaymentActionRequired.code,
        LockTimeout.code,
        ConcurrentUpdate.code,
        InternalError.code,
    }
)

# The errors that are their key's final answer (``final``): stored with the key and
# replayed to every retry. Any other error is not stored: nothing replays it.
STORED_ERRORS = frozenset(
    cls.code
    for cls in (
        OutOfStock,
        OrderKeyReused,
        OrderNotCancellable,
        OrderNotPayable,
        PaymentDeclined,
        PaymentFailed,
    )
    if cls.final
)

# Marked, not translated here: ``why`` translates into the language of the page.
_WHY: dict[str, str] = {
    IdempotencyKeyInUse.code: gettext_noop(
        "Another request with this key (an earlier click, or one sent at the same moment "
        "that got there first) is still running, so nothing new was started. Retrying "
        "with the same key."
    ),
    PaymentOutcomeUnknown.code: gettext_noop(
        "The provider did not answer in time: nobody knows yet whether the charge happened. "
        "Retrying with the same key, which asks the provider first, so you are never "
        "charged twice."
    ),
    LockTimeout.code: gettext_noop(
        "The order was busy; nothing changed. Retrying with the same key."
    ),
    PaymentActionRequired.code: gettext_noop(
        "The provider waits for you to confirm the payment (3-D Secure). Nothing is stored: "
        "confirm it at the provider, then pay again with the same key, which asks the "
        "provider what you did."
    ),
    ConcurrentUpdate.code: gettext_noop(
        "A concurrent request changed the same rows; this one was rolled back. "
        "Retrying with the same key."
    ),
    InternalError.code: gettext_noop(
        "Something failed half-way and was rolled back to the last recovery point. "
        "Retrying with the same key resumes there."
    ),
    IdempotencyKeyMismatch.code: gettext_noop(
        "This key was already used for a different request; the first one stands and "
        "nothing new happened. A different request needs a new key."
    ),
    IdempotencyKeyInvalid.code: gettext_noop(
        "The key was altered: it is not 1-255 characters from A-Z a-z 0-9 - _ . : ~. "
        "Nothing was attempted; reload the page for a fresh key."
    ),
    IdempotencyKeyMissing.code: gettext_noop("No key was sent, so nothing was attempted."),
    OutOfStock.code: gettext_noop(
        "Not enough stock, and nothing was reserved. This answer is stored: the same key "
        "gets it again. Change the basket and order again (that is a new key)."
    ),
    UnknownSku.code: gettext_noop("A product in the basket no longer exists; nothing was stored."),
    OrderKeyReused.code: gettext_noop(
        "This key made an order long ago (its record expired); use a new key."
    ),
    OrderNotPayable.code: gettext_noop(
        "The order is already paid, cancelled, or has a payment in progress: nothing was "
        "charged. This answer is stored for the key."
    ),
    PaymentDeclined.code: gettext_noop(
        "The provider declined the charge. Stored for this key; paying again is a new "
        "attempt with a new key (the page makes one)."
    ),
    PaymentFailed.code: gettext_noop(
        "Reconciliation found no charge and closed the attempt at the provider. "
        "Paying again is a new attempt with a new key."
    ),
    CheckoutTokenInvalid.code: CheckoutTokenInvalid.default_detail,
    CheckoutUnavailable.code: gettext_noop(
        "Redis does not answer, so no checkout can be checked; try later."
    ),
    "validation-error": gettext_noop(
        "The form has errors; nothing was attempted and nothing was stored."
    ),
    "not-found": gettext_noop("No such order of yours; nothing was attempted."),
    "not-authenticated": gettext_noop(
        "Your session has ended: log in again. Nothing was attempted."
    ),
    "throttled": gettext_noop("Too many requests; nothing was attempted. Wait and try again."),
}


# The freshness of an answer in the reader's words (its value stays English: the
# pages' styles and the pay script key on it).
_FRESHNESS_WORDS = {
    "replayed": gettext_noop("replayed"),
    "fresh": gettext_noop("fresh"),
    "not stored": gettext_noop("not stored"),
}


def status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase  # "Created", not "OK", for a 201
    except ValueError:
        return "error"


@dataclass(frozen=True)
class Answer:
    status: int
    replayed: bool
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)

    # --- construction ----------------------------------------------------------------

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> Answer:
        """What ``idempotency.core.execute`` returned: stored, or replayed from the record."""
        return cls(outcome.status, outcome.replayed, outcome.body, dict(outcome.headers))

    @classmethod
    def from_error(cls, error: ApplicationError) -> Answer:
        """An error raised before anything was stored: never a replay."""
        return cls(error.status, False, error.to_problem(), dict(error.headers))

    @classmethod
    def from_http(cls, *, status: int, headers: Mapping[str, str], body: Any) -> Answer:
        """An answer received over HTTP (the chaos panel's and the story's requests)."""
        replayed = headers.get(REPLAYED_HEADER, "").lower() == "true"
        kept = {
            name: value
            for name, value in headers.items()
            if name.lower() in {"retry-after", "location", REPLAYED_HEADER.lower()}
        }
        return cls(status, replayed, body, kept)

    # --- reading ---------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        # A 202 payment-action-required is a problem document: nothing done yet.
        problem = isinstance(self.body, Mapping) and "code" in self.body and "type" in self.body
        return 200 <= self.status < 300 and not problem

    @property
    def problem(self) -> Mapping[str, Any]:
        return self.body if not self.ok and isinstance(self.body, Mapping) else {}

    @property
    def code(self) -> str:
        return str(self.problem.get("code", ""))

    @property
    def detail(self) -> str:
        return str(self.problem.get("detail", ""))

    @property
    def retry_after(self) -> float | None:
        raw = next((v for k, v in self.headers.items() if k.lower() == "retry-after"), None)
        try:
            return float(raw) if raw is not None else None
        except ValueError:
            return None

    @property
    def retry_same_key(self) -> bool:
        return self.code in RETRY_SAME_KEY

    @property
    def stored(self) -> bool:
        """Whether this answer is (now) the key's stored answer, which retries replay."""
        return self.replayed or self.ok or self.code in STORED_ERRORS

    @property
    def freshness(self) -> str:
        """``replayed``, ``fresh`` (ran now, stored), or ``not stored`` (a 409, a 503)."""
        if self.replayed:
            return "replayed"
        return "fresh" if self.stored else "not stored"

    @property
    def summary(self) -> str:
        """One line: ``503 payment-outcome-unknown, fresh``, ``201 Created, fresh``."""
        what = self.code or status_phrase(self.status)
        return f"{self.status} {what}, {gettext(_FRESHNESS_WORDS[self.freshness])}"

    @property
    def why(self) -> str:
        if self.ok:
            if self.replayed:
                return gettext(
                    "Nothing ran again: this is the stored answer of the first request with "
                    "this key (Idempotent-Replayed: true)."
                )
            return gettext(
                "The action ran now; its answer is stored under this key for every retry."
            )
        known = _WHY.get(self.code)
        why = gettext(known) if known else self.detail or gettext("The request failed.")
        if self.replayed:
            return gettext(
                "The stored answer of the first request with this key, replayed. %(why)s"
            ) % {"why": why}
        return why

    def as_json(self) -> dict[str, Any]:
        """What the pay button's script receives (the same words as the page)."""
        return {
            "status": self.status,
            "replayed": self.replayed,
            "freshness": self.freshness,
            "code": self.code,
            "detail": self.detail,
            "summary": self.summary,
            "why": self.why,
            "retry_same_key": self.retry_same_key,
            "retry_after": self.retry_after,
        }
