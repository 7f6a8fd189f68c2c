"""The key layer switched off (``fastpaths/unkeyed.py``): nothing looked up, stored or replayed.

``IDEMPOTENCY_ENABLED=false`` names the same seams as ``LAYER_OFF``, and with
them every request runs its flow once: no record is read or written, no quota
is counted, and a repeat meets only the business rows' own guards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fastpaths.unkeyed import LAYER_OFF
from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.conftest import new_key
from tests.processes import ROOT

pytestmark = pytest.mark.django_db


def test_the_variable_names_the_seams_layer_off_names():
    names = sorted(LAYER_OFF)
    script = (
        "import json, django; django.setup(); from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n, None) for n in {names!r}}}))"
    )
    env = {**os.environ, "IDEMPOTENCY_ENABLED": "false", "DJANGO_SETTINGS_MODULE": "tests.settings"}

    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    assert json.loads(done.stdout.splitlines()[-1]) == LAYER_OFF


def test_with_the_layer_off_nothing_is_looked_up_stored_replayed_or_counted(create_order, settings):
    for name, value in LAYER_OFF.items():
        setattr(settings, name, value)
    settings.MAX_KEYS_PER_USER_PER_HOUR = 1  # the layer on would refuse the second key
    key = new_key()

    with CaptureQueriesContext(connection) as queries:
        first = create_order(key=key)
    again = create_order(key=key)
    others = [create_order(key=new_key()) for _ in range(2)]

    assert first.status_code == 201
    assert first["Idempotent-Replayed"] == "false"
    # Not replayed: the order's own unique (user, key) index answers the repeat
    assert (again.status_code, again["Idempotent-Replayed"]) == (409, "false")
    assert again.json()["code"] == "idempotency-key-reused"
    assert [response.status_code for response in others] == [201, 201]
    assert IdempotencyKey.objects.count() == 0
    assert Order.objects.count() == 3
    assert not [q for q in queries if "idempotency_idempotencykey" in q["sql"]]
