"""What a pay answers once its attempt is settled: the response its key stores.

One definition for every path that finishes a pay request: the flow's last
phase (``payments/flows.py``), a retry resuming it, and the reconciler's
completer (``reconcile/recovery/completion.py``) storing the answer of a
request whose client walked away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from idempotency.phases import Respond
from payments.errors import PaymentDeclined, PaymentFailed
from payments.models import Payment, PaymentStatus
from payments.services import CLOSED_BY_RECONCILIATION

# The answer to a pay whose charge came too late for its order (see payments/orphans.py).
ORPHANED_DETAIL = (
    "The provider captured this payment after the order could no longer take it; "
    "the money is being refunded automatically."
)


def pay_answer(payment: Payment, *, order_body: Callable[[], Any]) -> Respond | None:
    """The final answer of a pay whose attempt is settled (None while it is not).

    ``order_body`` gives the paid order's representation: read here and now for one
    request, or from one read for a whole batch (the reconciler's completer).
    """
    match payment.status:
        case PaymentStatus.SUCCEEDED:
            return Respond(
                status=200, body=order_body(), resource_type="payment", resource_id=payment.pk
            )
        case PaymentStatus.ORPHANED:
            return _final_error(
                PaymentFailed(ORPHANED_DETAIL, payment=payment.out_trade_no), payment
            )
        case PaymentStatus.FAILED if payment.failure_code == CLOSED_BY_RECONCILIATION:
            return _final_error(PaymentFailed(payment=payment.out_trade_no), payment)
        case PaymentStatus.FAILED:
            return _final_error(
                PaymentDeclined(payment=payment.out_trade_no, reason=payment.failure_code), payment
            )
        case _:
            return None


def _final_error(error: PaymentDeclined | PaymentFailed, payment: Payment) -> Respond:
    # Returned, not raised: the payment's FAILED state must commit with the answer.
    return replace(Respond.from_error(error), resource_type="payment", resource_id=payment.pk)
