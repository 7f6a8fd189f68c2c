"""A shop in the production profile: no sandbox, no forged payment, `check --deploy` clean."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from callbacks.models import ProviderNotification
from config.production import DEVELOPMENT_PROVIDER_API_KEY, DEVELOPMENT_WEBHOOK_SECRET
from orders.models import Order
from payments.models import Payment
from payments.services import payment_create
from tests.conftest import new_key
from tests.processes import run_django, run_python
from tests.production.environment import production_env

SANDBOX_PATHS = [
    "/sandbox/v1/wallets/alice",
    "/sandbox/v1/charges/ORDER-1",
    "/sandbox/v1/faults",
]


def test_the_sandbox_is_not_there_on_a_production_shop():
    # Nor anything else of the demo or the tools: no app, no URL, no task, no module.
    result = run_django(
        f"""
        import json
        import sys
        from django.apps import apps
        from django.test import Client
        from config.celery import app

        client = Client(HTTP_AUTHORIZATION="Bearer {DEVELOPMENT_PROVIDER_API_KEY}")
        statuses = [client.get(path, secure=True).status_code for path in {SANDBOX_PATHS!r}]
        statuses.append(client.post("/sandbox/v1/charges", secure=True).status_code)
        app.loader.import_default_modules()
        print(json.dumps({{
            "statuses": statuses,
            "apps": [
                c.label for c in apps.get_app_configs() if c.label in ("sandbox", "storefront")
            ],
            "task": any(name.startswith(("demo.", "tools.")) for name in app.tasks),
            "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("demo", "tools")),
        }}))
        """,
        env=production_env(ALLOWED_HOSTS="testserver"),
    )

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen == {"statuses": [404, 404, 404, 404], "apps": [], "task": False, "modules": []}


@pytest.mark.django_db(transaction=True)
def test_a_notification_signed_with_the_development_secret_is_refused(create_order, user):
    # Given a pending payment whose out_trade_no the attacker read from their own order
    number = create_order(key=new_key()).json()["number"]
    payment = payment_create(user_id=user.pk, order_number=number)
    body = {
        "notify_id": "N-forged",
        "trade_no": "T-forged",
        "out_trade_no": payment.out_trade_no,
        "trade_status": "SUCCESS",
        "amount": payment.amount,
        "currency": payment.currency,
        "paid_at": "2026-11-29T09:00:00+00:00",
    }

    # When they sign it with the public development secret and post it to the shop
    result = run_django(
        f"""
        import json, time
        from django.test import Client
        from payments.providers.sandbox import sign

        raw = json.dumps({body!r}).encode()
        stamp = int(time.time())
        signature = sign(secret="{DEVELOPMENT_WEBHOOK_SECRET}", timestamp=stamp, raw_body=raw)
        response = Client().post(
            "/api/v1/callbacks/sandbox/", raw, content_type="application/json",
            headers={{"Sandbox-Signature": f"t={{stamp}},v1={{signature}}"}}, secure=True,
        )
        print(json.dumps({{"status": response.status_code, "body": response.json()}}))
        """,
        env=production_env(ALLOWED_HOSTS="testserver"),
    )

    # Then the shop refuses it and nothing is paid
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.splitlines()[-1])
    assert answer["status"] == 400
    assert answer["body"]["code"] == "signature-invalid"
    assert Payment.objects.get(pk=payment.pk).status == "PENDING"
    assert Order.objects.get(pk=payment.order_id).status == "UNPAID"
    assert not ProviderNotification.objects.exists()


def test_check_deploy_is_clean_with_the_documented_settings():
    result = run_python(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env=production_env()
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.django_db
def test_seed_demo_refuses_outside_demo_mode(settings):
    settings.DEMO_MODE = False

    with pytest.raises(CommandError, match="DEMO_MODE"):
        call_command("seed_demo")

    assert not User.objects.exists()
