"""The notification endpoint's bounds: a generous rate per source address (429 with
Retry-After, nothing stored past it), and unmatched notifications keep their raw body
only for UNMATCHED_NOTIFICATION_BODY_TTL_S."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from callbacks.models import ProviderNotification
from callbacks.services import callback_unmatched_strip
from payments.providers.sandbox import sign
from tests.callbacks.test_api import URL, body_for, notify

pytestmark = pytest.mark.django_db


def notify_from(address: str, body: dict[str, Any], **headers: str) -> Any:
    raw = json.dumps(body).encode()
    stamp = int(time.time())
    secret = django_settings.SANDBOX_WEBHOOK_SECRET.split(",")[0]
    signature = f"t={stamp},v1={sign(secret=secret, timestamp=stamp, raw_body=raw)}"
    return Client().post(
        URL,
        raw,
        content_type="application/json",
        headers={"Sandbox-Signature": signature, **headers},
        REMOTE_ADDR=address,
    )


def new_address() -> str:
    return f"10.77.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def test_past_the_rate_per_source_a_notification_is_429_and_not_stored(
    settings, payment, still_clock
):
    settings.CALLBACK_RATE_PER_ADDRESS = "2/min"
    address = new_address()
    for _ in range(2):
        notify_from(address, body_for(payment, out_trade_no=f"P-{uuid.uuid4().hex[:8]}"))

    refused = notify_from(address, body_for(payment))
    elsewhere = notify_from(new_address(), body_for(payment, notify_id="N-elsewhere"))

    assert elsewhere.status_code == 200
    assert refused.status_code == 429
    assert refused.json()["code"] == "throttled"
    assert int(refused["Retry-After"]) > 0  # the provider retries after it
    assert ProviderNotification.objects.count() == 3  # two strays, then the other source


def test_a_forwarded_for_header_does_not_make_a_new_source(settings, payment, still_clock):
    settings.CALLBACK_RATE_PER_ADDRESS = "1/min"
    address = new_address()
    notify_from(address, body_for(payment, out_trade_no="P-stray"))

    refused = notify_from(address, body_for(payment), **{"X-Forwarded-For": new_address()})

    assert refused.status_code == 429


def test_an_empty_rate_turns_the_limit_off(settings, payment):
    settings.CALLBACK_RATE_PER_ADDRESS = ""
    address = new_address()

    statuses = {notify_from(address, body_for(payment)).status_code for _ in range(3)}

    assert statuses == {200}


def test_unmatched_notifications_lose_their_raw_body_after_the_bound(settings, payment):
    settings.UNMATCHED_NOTIFICATION_BODY_TTL_S = 3600
    stray = body_for(payment, out_trade_no="P-NOT-OURS")
    assert notify(stray).status_code == 422
    assert notify(body_for(payment, out_trade_no="P-NEWER")).status_code == 422
    assert notify(body_for(payment)).status_code == 200  # applied: kept whole
    old = timezone.now() - timedelta(hours=2)
    ProviderNotification.objects.exclude(out_trade_no="P-NEWER").update(received_at=old)

    stripped = callback_unmatched_strip()

    rows = {row.out_trade_no: row for row in ProviderNotification.objects.all()}
    assert stripped == 1
    assert rows["P-NOT-OURS"].raw_payload == ""
    assert rows["P-NEWER"].raw_payload != ""
    assert rows[payment.out_trade_no].raw_payload != ""
    assert callback_unmatched_strip() == 0  # nothing left to do: idempotent
    # The stripped row still answers a redelivery the same way
    again = notify(stray)
    assert again.status_code == 422
    assert again.json()["code"] == "callback-unknown-payment"
