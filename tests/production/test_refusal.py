"""Production profile: nothing starts with a missing or public secret, and one message
names every problem (config/production.py)."""

from __future__ import annotations

import secrets

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.production import (
    DEVELOPMENT_PROVIDER_API_KEY,
    DEVELOPMENT_SECRET_KEY,
    DEVELOPMENT_STRIPE_API_KEY,
    DEVELOPMENT_STRIPE_WEBHOOK_SECRET,
    DEVELOPMENT_WEBHOOK_SECRET,
    refuse_unsafe_start,
)
from tests.processes import run_python
from tests.production.environment import production_env


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"SECRET_KEY": ""}, "SECRET_KEY is not set"),
        ({"SECRET_KEY": DEVELOPMENT_SECRET_KEY}, "SECRET_KEY is a development default"),
        ({"SECRET_KEY": "django-insecure-" + "x" * 50}, "SECRET_KEY is a development default"),
        ({"SECRET_KEY": "s" * 49}, "SECRET_KEY is shorter than 50 characters"),
        ({"SECRET_KEY": " " * 50}, "SECRET_KEY has fewer than 20 distinct characters"),
        ({"SECRET_KEY": "a" * 50}, "SECRET_KEY has fewer than 20 distinct characters"),
        (
            {"SECRET_KEY": "0123456789abcdefghi" * 3},
            "SECRET_KEY has fewer than 20 distinct characters",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": "x"},
            "SANDBOX_WEBHOOK_SECRET is (or includes) a secret shorter than 32 characters",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": "w" * 31},
            "SANDBOX_WEBHOOK_SECRET is (or includes) a secret shorter than 32 characters",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": f"{'n' * 40},short"},
            "SANDBOX_WEBHOOK_SECRET is (or includes) a secret shorter than 32 characters",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": "a" * 32},
            "SANDBOX_WEBHOOK_SECRET is (or includes) a secret of fewer than 20 distinct",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": "0123456789abcdefghi" * 2},
            "SANDBOX_WEBHOOK_SECRET is (or includes) a secret of fewer than 20 distinct",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": f"whsec-{'k' * 40},{'b' * 64}"},
            "SANDBOX_WEBHOOK_SECRET is (or includes) a secret of fewer than 20 distinct",
        ),
        ({"SANDBOX_WEBHOOK_SECRET": ""}, "SANDBOX_WEBHOOK_SECRET is not set"),
        (
            {"SANDBOX_WEBHOOK_SECRET": DEVELOPMENT_WEBHOOK_SECRET},
            "SANDBOX_WEBHOOK_SECRET is (or includes) the development default",
        ),
        (
            {"SANDBOX_WEBHOOK_SECRET": f"whsec-new,{DEVELOPMENT_WEBHOOK_SECRET}"},
            "SANDBOX_WEBHOOK_SECRET is (or includes) the development default",
        ),
        ({"PROVIDER_API_KEY": ""}, "PROVIDER_API_KEY is not set"),
        (
            {"PROVIDER_API_KEY": DEVELOPMENT_PROVIDER_API_KEY},
            "PROVIDER_API_KEY is the development default",
        ),
        (
            {"SANDBOX_API_KEYS": DEVELOPMENT_PROVIDER_API_KEY},
            "SANDBOX_API_KEYS includes the development default",
        ),
        ({"DATABASE_URL": ""}, "DATABASE_URL is not set"),
        ({"REDIS_URL": ""}, "REDIS_URL is not set"),
        ({"DEBUG": "true"}, "DEBUG is on"),
        ({"SANDBOX_ENABLED": "true"}, "SANDBOX_ENABLED is on"),
    ],
)
def test_each_unsafe_setting_is_refused_and_named(overrides, named):
    env = production_env(**overrides)

    with pytest.raises(ImproperlyConfigured) as refused:
        refuse_unsafe_start(env)

    message = str(refused.value)
    assert named in message
    assert message.count("\n  - ") == 1  # that one problem, no other


def test_the_documented_production_settings_are_accepted():
    refuse_unsafe_start(production_env())  # does not raise


def test_one_message_names_every_problem_at_once():
    env = production_env(
        SECRET_KEY="", SANDBOX_WEBHOOK_SECRET="", PROVIDER_API_KEY="", DATABASE_URL="", REDIS_URL=""
    )

    with pytest.raises(ImproperlyConfigured) as refused:
        refuse_unsafe_start(env)

    message = str(refused.value)
    for name in (
        "SECRET_KEY",
        "SANDBOX_WEBHOOK_SECRET",
        "PROVIDER_API_KEY",
        "DATABASE_URL",
        "REDIS_URL",
    ):
        assert f"{name} is not set" in message


BARE = {
    "SECRET_KEY": "",
    "SANDBOX_WEBHOOK_SECRET": "",
    "PROVIDER_API_KEY": "",
    "DATABASE_URL": "",
    "REDIS_URL": "",
}


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["manage.py", "runserver", "--noreload", "127.0.0.1:0"], id="runserver"),
        pytest.param(["manage.py", "migrate", "--no-input"], id="migrate"),
        pytest.param(["-c", "import config.wsgi"], id="gunicorn"),
        pytest.param(["-m", "celery", "-A", "config.celery:app", "worker"], id="worker"),
        pytest.param(["-m", "celery", "-A", "config.celery:app", "beat"], id="beat"),
    ],
)
def test_a_process_without_its_settings_refuses_to_start(argv, tmp_path):
    # Without DATABASE_URL / REDIS_URL: not one embedded server may start either.
    env = production_env(**BARE, ONCESHOP_VAR_DIR=str(tmp_path / "var"))

    result = run_python(argv, env=env)

    assert result.returncode != 0
    assert "refuses to start in the production profile" in result.stderr + result.stdout
    assert "SANDBOX_WEBHOOK_SECRET is not set" in result.stderr + result.stdout
    assert not (tmp_path / "var").exists()


def test_low_entropy_secrets_are_named_together_in_one_message():
    env = production_env(SECRET_KEY=" " * 50, SANDBOX_WEBHOOK_SECRET="x")

    with pytest.raises(ImproperlyConfigured) as refused:
        refuse_unsafe_start(env)

    message = str(refused.value)
    assert message.count("\n  - ") == 2
    assert "SECRET_KEY has fewer than 20 distinct characters" in message
    assert "SANDBOX_WEBHOOK_SECRET is (or includes) a secret shorter than 32" in message


def test_a_rotating_pair_of_generated_webhook_secrets_is_accepted():
    # Two secrets while rotating, each from a generator: many distinct characters each
    pair = ",".join(f"whsec-{secrets.token_urlsafe(32)}" for _ in range(2))

    refuse_unsafe_start(production_env(SANDBOX_WEBHOOK_SECRET=pair))  # does not raise


STRIPE_KEYS = {
    "STRIPE_API_KEY": f"sk_live_{secrets.token_urlsafe(24)}",
    "STRIPE_WEBHOOK_SECRET": f"whsec_{secrets.token_urlsafe(32)}",
}


@pytest.mark.parametrize("missing", ["STRIPE_API_KEY", "STRIPE_WEBHOOK_SECRET"])
def test_stripe_without_its_keys_is_refused(missing):
    env = production_env(PAYMENT_PROVIDER="stripe", **{**STRIPE_KEYS, missing: ""})

    with pytest.raises(ImproperlyConfigured) as refused:
        refuse_unsafe_start(env)

    message = str(refused.value)
    assert f"{missing} is not set (PAYMENT_PROVIDER=stripe)" in message
    assert message.count("\n  - ") == 1


def test_stripe_with_its_keys_needs_none_of_the_sandbox_secrets():
    env = production_env(
        PAYMENT_PROVIDER="stripe", SANDBOX_WEBHOOK_SECRET="", PROVIDER_API_KEY="", **STRIPE_KEYS
    )

    refuse_unsafe_start(env)  # does not raise


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"STRIPE_API_KEY": DEVELOPMENT_STRIPE_API_KEY},
            "STRIPE_API_KEY is the development default",
        ),
        (
            {"STRIPE_WEBHOOK_SECRET": DEVELOPMENT_STRIPE_WEBHOOK_SECRET},
            "STRIPE_WEBHOOK_SECRET is (or includes) the development default",
        ),
        (
            {"STRIPE_WEBHOOK_SECRET": "whsec_example"},
            "STRIPE_WEBHOOK_SECRET is (or includes) a secret shorter than 32 characters",
        ),
        (
            {"STRIPE_WEBHOOK_SECRET": "w" * 31},
            "STRIPE_WEBHOOK_SECRET is (or includes) a secret shorter than 32 characters",
        ),
        (
            {"STRIPE_WEBHOOK_SECRET": "whsec_" + "a" * 32},
            "STRIPE_WEBHOOK_SECRET is (or includes) a secret of fewer than 20 distinct",
        ),
        (
            {"STRIPE_WEBHOOK_SECRET": "whsec_" + "0123456789abc" * 3},
            "STRIPE_WEBHOOK_SECRET is (or includes) a secret of fewer than 20 distinct",
        ),
    ],
)
def test_each_unsafe_stripe_secret_is_refused_and_named(overrides, named):
    env = production_env(PAYMENT_PROVIDER="stripe", **{**STRIPE_KEYS, **overrides})

    with pytest.raises(ImproperlyConfigured) as refused:
        refuse_unsafe_start(env)

    message = str(refused.value)
    assert named in message
    assert message.count("\n  - ") == 1


def test_the_demos_stripe_keys_are_the_refused_development_defaults():
    from demo.runner import DEMO_STRIPE

    assert DEMO_STRIPE["STRIPE_API_KEY"] == DEVELOPMENT_STRIPE_API_KEY
    assert DEMO_STRIPE["STRIPE_WEBHOOK_SECRET"] == DEVELOPMENT_STRIPE_WEBHOOK_SECRET
