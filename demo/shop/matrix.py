"""The behaviour matrix of docs/design.md, as the "how it works" page shows it.

The situations and the "stored?" column are the design's words; every status
and code is read from the error class that produces it, so the page shows what
the code does, not what someone once typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext

from edge.errors import ApplicationError, InternalError, ValidationFailed
from idempotency.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyInvalid,
    IdempotencyKeyMismatch,
    IdempotencyKeyMissing,
)
from orders.errors import OutOfStock
from payments.errors import OrderNotPayable, PaymentDeclined, PaymentOutcomeUnknown


@dataclass(frozen=True)
class MatrixRow:
    situation: str
    answer: str
    stored: str


def _error(cls: type[ApplicationError]) -> str:
    return f"{cls.status} {cls.code}"


def behaviour_matrix() -> list[MatrixRow]:
    """In the page's language (the codes and headers stay as the API sends them)."""
    no, yes = gettext("no"), gettext("yes")
    return [
        MatrixRow(gettext("header missing"), _error(IdempotencyKeyMissing), no),
        MatrixRow(gettext("header malformed"), _error(IdempotencyKeyInvalid), no),
        MatrixRow(gettext("not authenticated / forbidden / throttled"), "401 / 403 / 429", no),
        MatrixRow(
            gettext("body fails validation before the action starts"),
            _error(ValidationFailed),
            no,
        ),
        MatrixRow(gettext("new key"), gettext("run the action; store the response"), yes),
        MatrixRow(
            gettext("same key, same fingerprint, finished"),
            gettext("the stored status, body and Location, plus Idempotent-Replayed: true"),
            gettext("(already)"),
        ),
        MatrixRow(
            gettext("same key, request still in flight (lock held)"),
            f"{_error(IdempotencyKeyInUse)}, Retry-After",
            no,
        ),
        MatrixRow(gettext("same key, different fingerprint"), _error(IdempotencyKeyMismatch), no),
        MatrixRow(
            gettext("business error once the action started (out of stock, declined, not payable)"),
            gettext("its 4xx (%(examples)s), replayed on retry")
            % {
                "examples": f"{_error(OutOfStock)}, {_error(PaymentDeclined)}, "
                f"{_error(OrderNotPayable)}"
            },
            yes,
        ),
        MatrixRow(
            gettext("provider outcome unknown (timeout, provider 5xx)"),
            gettext("%(error)s, Retry-After; retry with the same key")
            % {"error": _error(PaymentOutcomeUnknown)},
            gettext("no: the record keeps its recovery point"),
        ),
        MatrixRow(
            gettext("unexpected exception"),
            gettext("%(error)s; the phase rolled back; retry with the same key resumes")
            % {"error": _error(InternalError)},
            no,
        ),
    ]
