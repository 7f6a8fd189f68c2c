"""The fixed corpus: hostile requests for what the OpenAPI schema does not describe."""

from __future__ import annotations

from tests.hostile.cases import BIG, DEEP, FORM, Case, charge, notification, order_body, sender

ORDERS = "/api/v1/orders/"
CALLBACK = "/api/v1/callbacks/sandbox/"
CHARGES = "/sandbox/v1/charges"
SIG = "Sandbox-Signature"
HEX = "a" * 64

order = sender("customer", "POST", ORDERS, {"Idempotency-Key": "corpus-key-1"})
pay = sender("customer", "POST", "/api/v1/orders/{number}/pay/", {"Idempotency-Key": "k-2"})
cancel = sender("customer", "POST", "/api/v1/orders/{number}/cancel/", {"Idempotency-Key": "k-3"})
token = sender("anonymous", "POST", "/api/v1/auth/token/")
unsigned = sender("anonymous", "POST", CALLBACK)
signed = sender("provider", "POST", CALLBACK)
charges = sender("merchant", "POST", CHARGES, {"Idempotency-Key": "corpus-charge-1"})
faults = sender("staff", "POST", "/sandbox/v1/faults")
login = sender("anonymous", "POST", "/login/")
checkout = sender("web", "POST", "/checkout/")
TOKEN_43 = b"checkout_token=" + b"A" * 43

API: dict[str, Case] = {
    "order-oversize": order(b'{"lines": [], "x": "' + b"x" * BIG + b'"}', 413, "payload-too-large"),
    "order-deep": order(DEEP, 400, "json-too-deep"),
    "order-latin-1": order('{"lines": [{"sku": "thé"}]}'.encode("latin-1"), 400, "malformed-json"),
    "order-utf-16": order(order_body().decode().encode("utf-16"), 400, "malformed-json"),
    "order-utf-8-bom": order(b"\xef\xbb\xbf" + order_body(), 400, "malformed-json"),
    "order-text-plain": order(
        order_body(), 415, "unsupported-media-type", content_type="text/plain"
    ),
    "order-form-encoded": order(b"lines=1", 415, "unsupported-media-type", content_type=FORM),
    "order-nan": order(order_body().replace(b"1}", b"NaN}"), 400, "json-number-not-finite"),
    "order-1e400": order(order_body().replace(b"1}", b"1e400}"), 400, "json-number-not-finite"),
    "order-quantity-2**63": order(order_body(quantity=2**63), 400, "validation-error"),
    "order-quantity-4000-digits": order(
        order_body().replace(b"1}", b"1" + b"0" * 4000 + b"}"), 400, "validation-error"
    ),
    "order-nul-in-sku": order(order_body(sku="A\u0000"), 400, "validation-error"),
    "order-unicode-key": order(
        order_body(), 400, "idempotency-key-invalid", headers={"Idempotency-Key": "ключ-1"}
    ),
    # Long values below the shop's head limits (edge/http_limits.py) reach the layer
    # that reads them; past the limits, the head is refused first (414, 431).
    "order-8k-key": order(
        order_body(), 400, "idempotency-key-invalid", headers={"Idempotency-Key": "k" * 8_000}
    ),
    "order-10k-key": order(
        order_body(), 431, "header-fields-too-large", headers={"Idempotency-Key": "k" * 10_000}
    ),
    "order-nul-in-key": order(
        order_body(), 400, "idempotency-key-invalid", headers={"Idempotency-Key": "k\u0000x"}
    ),
    "order-8k-token": Case(
        "anonymous",
        "GET",
        ORDERS,
        status=401,
        code="not-authenticated",
        headers={"Authorization": "Token " + "t" * 8_000},
    ),
    "order-10k-token": Case(
        "anonymous",
        "GET",
        ORDERS,
        status=431,
        code="header-fields-too-large",
        headers={"Authorization": "Token " + "t" * 10_000},
    ),
    "order-unicode-token": Case(
        "anonymous",
        "GET",
        ORDERS,
        status=401,
        code="not-authenticated",
        headers={"Authorization": "Token токен"},
    ),
    "order-chunked-unterminated": order(order_body(), 411, "length-required", chunked=True),
    "pay-deep": pay(DEEP, 400, "json-too-deep"),
    "cancel-utf-32": cancel("{}".encode("utf-32"), 400, "malformed-json"),
    "order-detail-4k-number": Case(
        "customer", "GET", ORDERS + "9" * 4_000 + "/", status=404, code="not-found"
    ),
    "order-detail-10k-number": Case(
        "customer", "GET", ORDERS + "9" * 10_000 + "/", status=414, code="uri-too-long"
    ),
    "products-page-4000-digits": Case(
        "anonymous", "GET", "/api/v1/products/?page=" + "9" * 4_000, status=404, code="not-found"
    ),
    "token-deep": token(DEEP, 400, "json-too-deep"),
    "token-nan": token(b'{"username": NaN, "password": "x"}', 400, "json-number-not-finite"),
    "token-nul-username": token(
        b"username=a%00b&password=x", 400, "validation-error", content_type=FORM
    ),
    "token-latin-1-form": token(
        b"username=\xe9&password=\xff", 400, "validation-error", content_type=FORM
    ),
}

CALLBACKS: dict[str, Case] = {
    "callback-oversize": unsigned(b"x" * BIG, 413, "payload-too-large"),
    # Arabic-Indic digits and fullwidth hex letters
    "callback-unicode-signature": unsigned(
        notification(), 400, "signature-invalid", headers={SIG: "t=\u0661\u0662,v1=\uff41"}
    ),
    "callback-100-signatures": unsigned(
        notification(), 400, "signature-invalid", headers={SIG: "t=1" + f",v1={HEX}" * 100}
    ),
    "callback-8k-timestamp": unsigned(
        notification(), 400, "signature-invalid", headers={SIG: "t=" + "1" * 8_000}
    ),
    "callback-nul-signature": unsigned(
        notification(), 400, "signature-invalid", headers={SIG: f"t=1\u0000,v1={HEX}"}
    ),
    "callback-chunked-unterminated": signed(notification(), 411, "length-required", chunked=True),
    "callback-signed-deep": signed(DEEP, 400, "callback-malformed"),
    "callback-signed-latin-1": signed(
        notification().replace(b'"N-corpus"', '"N-é"'.encode("latin-1")), 400, "callback-malformed"
    ),
    "callback-signed-utf-16": signed(
        notification().decode().encode("utf-16"), 400, "callback-malformed"
    ),
    "callback-signed-xml": signed(
        b"<notify/>", 400, "callback-malformed", content_type="application/xml"
    ),
    "callback-signed-nan": signed(
        notification().replace(b"3998", b"NaN"), 400, "callback-malformed"
    ),
    "callback-signed-1e400": signed(
        notification().replace(b"3998", b"1e400"), 400, "callback-malformed"
    ),
    "callback-signed-float-amount": signed(
        notification().replace(b"3998", b"3998.0"), 400, "callback-malformed"
    ),
    "callback-signed-huge-amount": signed(notification(amount=10**300), 400, "callback-malformed"),
    "callback-signed-nul-id": signed(notification(notify_id="N\u0000"), 400, "callback-malformed"),
    "callback-signed-10k-id": signed(
        notification(trade_no="T" * 10_000), 400, "callback-malformed"
    ),
    "callback-signed-array": signed(b"[1, 2, 3]", 400, "callback-malformed"),
}

SANDBOX: dict[str, Case] = {
    "charge-oversize": charges(charge(payer="p" * BIG), 413, "payload-too-large"),
    "charge-deep": charges(DEEP, 400, "json-too-deep"),
    "charge-utf-16": charges(charge().decode().encode("utf-16"), 400, "malformed-json"),
    "charge-text-plain": charges(
        charge(), 415, "unsupported-media-type", content_type="text/plain"
    ),
    "charge-amount-2**63": charges(charge(amount=2**63), 400, "validation-error"),
    "charge-amount-1e400": charges(
        charge().replace(b"100", b"1e400"), 400, "json-number-not-finite"
    ),
    "charge-nul-reference": charges(charge(out_trade_no="P\u0000"), 400, "validation-error"),
    "charge-lone-surrogate": charges(charge(payer="p\ud800"), 400, "malformed-json"),
    "charge-unicode-key": charges(
        charge(), 400, "idempotency-key-invalid", headers={"Idempotency-Key": "ключ"}
    ),
    "charge-chunked-unterminated": charges(charge(), 411, "length-required", chunked=True),
    "charge-close-nul": Case(
        "merchant", "POST", CHARGES + "/%00/close", status=404, code="charge-not-found"
    ),
    "wallet-4k": Case(
        "merchant",
        "GET",
        "/sandbox/v1/wallets/" + "w" * 4_000,
        status=404,
        code="wallet-not-found",
    ),
    "faults-nan-delay": faults(
        b'{"mode": "decline", "delay_s": NaN}', 400, "json-number-not-finite"
    ),
    "faults-count-1e308": faults(b'{"mode": "decline", "count": 1e308}', 400, "validation-error"),
}

# The pages answer people: a form with its errors (200) or their own 4xx page. Only the
# middleware's answers (413, 411) are problem+json there.
PAGES: dict[str, Case] = {
    "login-nul-username": login(b"username=a%00b&password=x", content_type=FORM),
    "login-60k-password": login(b"username=a&password=" + b"p" * 60_000, content_type=FORM),
    "login-latin-1": login(b"username=\xe9\xff&password=\xfe", content_type=FORM),
    "login-oversize": login(
        b"username=a&password=" + b"p" * BIG, 413, "payload-too-large", content_type=FORM
    ),
    "checkout-5000-digit-quantity": checkout(
        TOKEN_43 + b"&qty-{sku}=" + b"9" * 5000, content_type=FORM
    ),
    "checkout-nan-quantity": checkout(TOKEN_43 + b"&qty-{sku}=NaN", content_type=FORM),
    "checkout-nul-token": checkout(b"checkout_token=%00&qty-{sku}=1", content_type=FORM),
    "checkout-chunked-unterminated": checkout(
        b"qty-{sku}=1", 411, "length-required", content_type=FORM, chunked=True
    ),
    "page-order-nul": Case("web", "GET", "/orders/%00/", status=404),
    "page-pay-nul": Case(
        "web", "POST", "/orders/%00/pay/", b"idempotency_key=k-1", 404, content_type=FORM
    ),
    "page-nul-session-cookie": Case(
        "anonymous", "GET", "/orders/", headers={"Cookie": 'sessionid="\\000abcdefghijk"'}
    ),
}

CASES: dict[str, Case] = {**API, **CALLBACKS, **SANDBOX, **PAGES}
