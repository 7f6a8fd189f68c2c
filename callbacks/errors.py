"""Errors of the notification endpoint (codes are part of the public contract)."""

from django.utils.translation import gettext_noop

from edge.errors import ApplicationError


class SignatureInvalid(ApplicationError):
    """Missing, forged, or stale signature: nothing is stored, nothing is applied."""

    code = "signature-invalid"
    title = gettext_noop("Signature invalid")
    default_detail = "The Sandbox-Signature header does not verify this body."


class CallbackMalformed(ApplicationError):
    """Signed correctly, but not a notification we can read."""

    code = "callback-malformed"
    title = gettext_noop("Malformed notification")
    default_detail = "The notification body is not valid."


class CallbackMismatch(ApplicationError):
    """The amount or currency disagrees with the payment attempt: recorded, not applied."""

    status = 422
    code = "callback-mismatch"
    title = gettext_noop("Notification does not match the payment")
    default_detail = "Amount or currency differ from the payment attempt; nothing was applied."


class CallbackUnknownPayment(ApplicationError):
    """No payment attempt carries this out_trade_no: recorded for reconciliation."""

    status = 422
    code = "callback-unknown-payment"
    title = gettext_noop("Unknown payment")
    default_detail = "No payment attempt has this out_trade_no; nothing was applied."
