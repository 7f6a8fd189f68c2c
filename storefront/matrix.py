"""The behaviour matrix of DESIGN.md section 4, as the "how it works" page shows it.

The situations and the "stored?" column are the design's words; every status
and code is read from the error class that produces it, so the page shows what
the code does, not what someone once typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.errors import ApplicationError, InternalError, ValidationFailed
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
    return [
        MatrixRow("header missing", _error(IdempotencyKeyMissing), "no"),
        MatrixRow("header malformed", _error(IdempotencyKeyInvalid), "no"),
        MatrixRow("not authenticated / forbidden / throttled", "401 / 403 / 429", "no"),
        MatrixRow("body fails validation before the action starts", _error(ValidationFailed), "no"),
        MatrixRow("new key", "run the action; store the response", "yes"),
        MatrixRow(
            "same key, same fingerprint, finished",
            "the stored status, body and Location, plus Idempotent-Replayed: true",
            "(already)",
        ),
        MatrixRow(
            "same key, request still in flight (lock held)",
            f"{_error(IdempotencyKeyInUse)}, Retry-After",
            "no",
        ),
        MatrixRow("same key, different fingerprint", _error(IdempotencyKeyMismatch), "no"),
        MatrixRow(
            "business error once the action started (out of stock, declined, not payable)",
            f"its 4xx ({_error(OutOfStock)}, {_error(PaymentDeclined)}, "
            f"{_error(OrderNotPayable)}), replayed on retry",
            "yes",
        ),
        MatrixRow(
            "provider outcome unknown (timeout, provider 5xx)",
            f"{_error(PaymentOutcomeUnknown)}, Retry-After; retry with the same key",
            "no: the record keeps its recovery point",
        ),
        MatrixRow(
            "unexpected exception",
            f"{_error(InternalError)}; the phase rolled back; retry with the same key resumes",
            "no",
        ),
    ]
