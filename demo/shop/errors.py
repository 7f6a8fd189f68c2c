"""Errors of the pages (the same problem shape as the API's, codes for the pages).

Titles and details stay English in the problem itself, like the API's; they are
marked (gettext_noop) so the pages can show them translated (demo/shop/answers.py).
"""

from django.utils.translation import gettext_noop

from edge.errors import ApplicationError, ServiceUnavailable


class CheckoutTokenInvalid(ApplicationError):
    """The checkout form's token was never issued to this session, or it expired.

    Not final: nothing is stored under the token, because nothing was attempted.
    """

    code = "checkout-token-invalid"
    title = gettext_noop("Checkout form expired")
    default_detail = gettext_noop(
        "This checkout form has expired or was not issued to you (a reload after logging "
        "in again does this too). Nothing was ordered: choose your items and place the "
        "order again."
    )


class CheckoutUnavailable(ServiceUnavailable):
    """Redis, which keeps the one-time checkout tokens, does not answer: 503
    ``service-unavailable`` with ``Retry-After``, and nothing was ordered."""

    default_detail = gettext_noop(
        "The checkout cannot issue or check its one-time tokens right now. Nothing was "
        "ordered: try again in a few seconds."
    )


class RedeliveryUnavailable(ServiceUnavailable):
    """Redis (the demo task's attempts, and its broker) does not answer: 503 with
    ``Retry-After``; nothing was started or killed."""

    default_detail = gettext_noop(
        "The redelivery demo keeps its runs in Redis, which does not answer right now. "
        "Nothing was started or killed: try again in a few seconds."
    )


class ChaosUnavailable(Exception):
    """A chaos action this platform or this run cannot perform (said in words)."""


class RefundAmountInvalid(ApplicationError):
    """The refund form's amount is not a positive whole number of minor units."""

    code = "validation-error"
    title = gettext_noop("Invalid request")
    default_detail = gettext_noop(
        "The amount must be a positive whole number of minor units, or blank."
    )
