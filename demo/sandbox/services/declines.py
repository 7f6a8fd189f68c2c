"""The ``decline_reason`` values the sandbox answers with (part of its API)."""

DECLINE_INSUFFICIENT_FUNDS = "insufficient_funds"
DECLINE_SCRIPTED = "do_not_honor"  # what a card network says when it gives no reason
# late_success: not paid yet. What an asynchronous method says while the payer has
# still to confirm; the merchant cannot tell it from a final decline.
DECLINE_PENDING = "payment_pending"
# requires_action: the customer was asked to act and declined to (or their wallet could
# not cover the charge when they did: insufficient_funds).
DECLINE_ABANDONED = "action_abandoned"
# Refunds: only a SUCCESS charge can be refunded, and never beyond its amount.
DECLINE_CHARGE_NOT_REFUNDABLE = "charge_not_refundable"
DECLINE_EXCEEDS_REFUNDABLE = "exceeds_refundable"
# refund_reversal: why a refund failed after it succeeded (Stripe's failure_reason).
DECLINE_REFUND_FAILED = "expired_or_canceled_card"
# A disputed charge cannot be refunded: the dispute decides where its money goes.
DECLINE_CHARGE_DISPUTED = "charge_disputed"
# dispute_lost: the reason a payer's bank gives most often.
DISPUTE_REASON = "fraudulent"
