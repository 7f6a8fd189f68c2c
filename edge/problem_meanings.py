"""What each problem code means, for the reader of its page (``/problems/<code>``).

Written for someone who received the code, not taken from the class docstrings
(which explain the code to its maintainer); marked for translation, so the
Chinese page says it in Chinese. `Backticks` are code spans on the page.
A test checks that every code the API answers with has one.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop as _

MEANINGS: dict[str, str] = {
    "bad-request": _(
        "The request cannot be acted on as sent. The answer's `detail` says what is wrong; "
        "fix the request before sending it again."
    ),
    "callback-malformed": _(
        "The notification is signed correctly but its body cannot be read as a notification. "
        "Nothing is applied."
    ),
    "callback-mismatch": _(
        "The notification's amount or currency disagrees with the payment attempt it names. "
        "It is recorded and never applied; reconciliation asks the provider."
    ),
    "callback-unknown-payment": _(
        "No payment attempt carries this `out_trade_no`. The notification is recorded for "
        "reconciliation."
    ),
    "charge-already-succeeded": _(
        "A close was asked for an attempt the provider has already charged. The answer "
        "carries the charge (`trade_no`, `trade_status`, and the whole charge under `charge`)"
        " so the merchant settles its side as paid instead of failing the attempt."
    ),
    "charge-not-awaiting-action": _(
        "The sandbox's charge no longer waits for the customer: completed, abandoned, or "
        "closed by the merchant. The body carries it under `charge`."
    ),
    "charge-not-found": _(
        "The provider holds no charge for this `out_trade_no`, not even a closed one."
    ),
    "checkout-token-invalid": _(
        "The checkout form's one-time token was never issued to this session, or it expired. "
        "Nothing was attempted and nothing is stored: reload the page for a new form."
    ),
    "client-secret-invalid": _(
        "The customer's action did not carry the `client_secret` of a sandbox charge that "
        "waits for the customer. Nothing was done."
    ),
    "concurrent-update": _(
        "PostgreSQL aborted the transaction (a serialization failure or a deadlock); nothing "
        "changed. Retry with the same key."
    ),
    "dispute-not-found": _("The provider holds no dispute of this id."),
    "header-fields-too-large": _(
        "A header field is longer than the shop reads, or the request has too many of them."
    ),
    "idempotency-key-in-use": _(
        "Another request with the same key is still running. Retry the same request with the "
        "same key after `Retry-After`: it will get that request's answer."
    ),
    "idempotency-key-invalid": _(
        "The `Idempotency-Key` header is not 1 to 255 characters from A-Z a-z 0-9 - _ . : ~ "
        "(bare, or as a quoted string)."
    ),
    "idempotency-key-mismatch": _(
        "The key was used before for a different method, route or body. A key names one "
        "request: a new request needs a new key."
    ),
    "idempotency-key-missing": _(
        "An unsafe request (create, pay, cancel, refund) must carry an `Idempotency-Key` "
        "header; this one has none."
    ),
    "idempotency-key-quota": _(
        "The user created `MAX_KEYS_PER_USER_PER_HOUR` keys this hour. Only a new key counts "
        "(a replay never does); nothing is stored, so the same request succeeds after `Retry-"
        "After`."
    ),
    "idempotency-key-reused": _(
        "The key already created an order, or started a refund of this order, and its "
        "idempotency record has since been reaped. Within the retention window the record "
        "replays instead; after it, the unique (user, key) index on orders and the unique "
        "(order, key) index on refunds still refuse a second order or a second refund."
    ),
    "internal-error": _(
        "Something unexpected failed. The step that failed was rolled back; retry with the "
        "same key."
    ),
    "json-number-not-finite": _(
        "The body holds `NaN`, `Infinity`, or a number too large for a double (`1e400`)."
    ),
    "json-too-deep": _("The body's arrays and objects are nested deeper than `MAX_JSON_DEPTH`."),
    "length-required": _(
        "The body is framed without `Content-Length` in a way the server cannot find the end of."
    ),
    "lock-timeout": _(
        "A row lock was not granted within `DATABASE_LOCK_TIMEOUT_MS`; nothing changed. Retry"
        " with the same key."
    ),
    "login-throttled": _(
        "Too many login attempts from this address or for this username. Try again later."
    ),
    "malformed-json": _(
        "The body is not UTF-8 JSON text (bad syntax or encoding, lone surrogates, huge integers)."
    ),
    "merchant-unauthorized": _(
        "No `Authorization: Bearer <key>` header, or a merchant key the sandbox provider does"
        " not know."
    ),
    "method-not-allowed": _(
        "This URL does not answer the request's method (the `Allow` header lists those it "
        "does). Nothing was attempted."
    ),
    "metrics-unauthorized": _(
        "Outside the demo, `/metrics` needs `Authorization: Bearer <METRICS_TOKEN>`."
    ),
    "mixed-currencies": _(
        "An order is paid in one currency, so all of its products must be priced in the same one."
    ),
    "not-acceptable": _(
        "The `Accept` header asks for a format the API cannot answer in (it answers JSON). "
        "Nothing was attempted."
    ),
    "not-ready": _(
        "A dependency the shop needs (the database, Redis) does not answer or is not "
        "migrated: the readiness check fails, so no traffic should be sent here yet."
    ),
    "not-authenticated": _(
        "The request carries no valid credentials (`Authorization: Token <token>`). Nothing "
        "was attempted."
    ),
    "not-found": _(
        "Nothing is found at this URL for this user: no such order, or not theirs. Nothing "
        "was attempted."
    ),
    "order-amount-out-of-range": _(
        "The order's total is one no charge can carry: 0, or above `ORDER_MAX_AMOUNT`. "
        "Refused before anything is stored."
    ),
    "order-not-cancellable": _(
        "Only an UNPAID order without a payment in progress can be cancelled."
    ),
    "order-not-payable": _(
        "The order is paid or cancelled, or another payment of it is in progress. This answer"
        " is stored for the key."
    ),
    "order-not-refundable": _(
        "Only a PAID order can be refunded, and only when no refund of it is in flight."
    ),
    "out-of-stock": _("A line could not be reserved, so nothing of the order was reserved."),
    "out-refund-no-mismatch": _(
        "The provider holds a refund with this `out_refund_no` for another charge or amount."
    ),
    "out-trade-no-mismatch": _(
        "The provider holds a charge with this `out_trade_no` for another amount, currency or"
        " payer."
    ),
    "payload-too-large": _("The body is larger than `API_MAX_BODY_BYTES`."),
    "payment-action-required": _(
        "The provider waits for the customer (3-D Secure, a redirect): `action` carries what"
        " the client needs to finish it (`client_secret`, `next_action`). Nothing is stored:"
        " the same key asks again, and answers the payment once the customer acted."
    ),
    "payment-declined": _(
        "The provider declined the charge. This answer is stored for the key: to pay again, "
        "use a new key."
    ),
    "payment-failed": _(
        "Reconciliation found no charge at the provider and closed the attempt there, so it "
        "can never be charged late."
    ),
    "payment-outcome-unknown": _(
        "The provider timed out or failed, so it is not known yet whether it charged. Nothing"
        " is stored: a retry with the same key asks the provider before charging, and never "
        "charges twice."
    ),
    "permission-denied": _("The user is known but may not do this. Nothing was attempted."),
    "provider-error": _(
        "The sandbox provider failed on purpose (the faults `error_before_commit` and "
        "`error_after_commit`). Like any provider 5xx, the caller cannot know whether it "
        "charged and must find out: retry with the same key, or query."
    ),
    "refund-declined": _(
        "The provider declined the refund. This answer is stored for the key: to refund "
        "again, use a new key."
    ),
    "refund-exceeds-paid": _(
        "The refund asks for more than is left to refund (the amount paid minus what was "
        "refunded already)."
    ),
    "refund-not-found": _("The provider holds no refund for this `out_refund_no`."),
    "refund-outcome-unknown": _(
        "The provider timed out or failed, so it is not known yet whether it refunded. "
        "Nothing is stored: a retry with the same key asks the provider first, and never "
        "refunds twice."
    ),
    "service-unavailable": _(
        "A service the action needs (Redis, for the checkout's one-time tokens) does not "
        "answer. Nothing was attempted; try again after `Retry-After`."
    ),
    "signature-invalid": _(
        "The notification's signature is missing, forged or stale. Nothing is stored and "
        "nothing is applied."
    ),
    "sku-exists": _("A product with this SKU exists already."),
    "statement-date-invalid": _("The statement's day is not a calendar date written `YYYY-MM-DD`."),
    "throttled": _(
        "A rate limit or quota was reached; nothing was done. `Retry-After` says when to try again."
    ),
    "too-many-open-orders": _(
        "The user already holds `MAX_OPEN_ORDERS_PER_USER` unpaid orders. Nothing is stored "
        "under the key, so the same request succeeds once one of them is paid, cancelled or "
        "expired."
    ),
    "unknown-sku": _("A line names a product that does not exist. Nothing is stored."),
    "unsupported-media-type": _(
        "The body is not sent as `application/json`. Nothing was attempted."
    ),
    "uri-too-long": _(
        "The request's path and query are longer than the shop reads (4,094 characters)."
    ),
    "validation-error": _(
        "The body or a parameter is not acceptable (the answer's `errors` say which and why);"
        " nothing was attempted."
    ),
    "wallet-not-found": _(
        "No charge was ever made for this payer, so the sandbox provider has no wallet for them."
    ),
}
