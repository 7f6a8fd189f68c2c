"""What the Idempotency-Key layer costs one order creation, in time and in instructions.

Wall time on a shared machine moves by tens of percent from minute to minute;
the number of instructions a request executes does not. Requests run one at a
time in this process; with ``--callgrind`` it runs itself under valgrind and has
the counters zeroed and dumped between the modes (layer on, off, replay)::

    python -m tools.bench.keylayer --database-url postgres://.../db   # ms per request
    python -m tools.bench.keylayer --database-url ... --callgrind     # instructions/request
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from statistics import fmean

from tools.bench import ROOT
from tools.bench.inprocess import ms_per_call, post, setup_django

PATH = "/api/v1/orders/"
SKU = "BENCH-KEYLAYER"
MODES = ("on", "off", "replay")
# Requests run before counting starts: connections opened, caches and imports warm.
WARMUP = 20
# valgrind runs Python about 50 times slower: 40 requests per measurement is enough,
# instruction counts do not vary from one request to the next.
CALLGRIND_REQUESTS = 40
# The timings alternate the modes this many times, so a burst of load from
# elsewhere hits all of them alike.
ROUNDS = 3


def order_body(sku: str) -> str:
    return json.dumps({"lines": [{"sku": sku, "quantity": 1}]})


def order_poster(*, token: str, sku: str) -> Callable[[str], None]:
    """POST one one-line order with the key given, in this process; expects 201."""
    from django.test import Client

    client, body = Client(), order_body(sku)
    return lambda key: post(
        client, PATH, body, {"Authorization": f"Token {token}", "Idempotency-Key": key}, 201
    )


def service_times(order: Callable[[str], None], *, iterations: int) -> dict[str, float]:
    """Mean ms per request by mode, one at a time in this process (no server, no
    concurrency): first-time creation with the layer on and off, and replays."""
    from django.test import override_settings

    from fastpaths.unkeyed import LAYER_OFF

    order(replay_key := str(uuid.uuid4()))
    per_round = max(1, iterations // ROUNDS)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(ROUNDS):
        for mode in MODES:

            def one(mode: str = mode) -> None:
                order(replay_key if mode == "replay" else str(uuid.uuid4()))

            with override_settings(**(LAYER_OFF if mode == "off" else {})):
                times[mode].append(ms_per_call(one, per_round))
    return {mode: fmean(times[mode]) for mode in MODES}


# Requests per WAL measurement, and how many measurements per mode: the WAL position
# is the whole cluster's, so writes from elsewhere add to a window; the least of a
# few short windows is the closest to this process's own.
WAL_REQUESTS, WAL_ROUNDS = 20, 5
DATABASE_COSTS = (
    ("wal_bytes_on", "WAL bytes per creation, layer on (least of 5 windows)", "", None),
    ("wal_bytes_off", "WAL bytes per creation, layer off (least of 5 windows)", "", None),
    ("statements_on", "SQL statements per creation, layer on", "", None),
    ("statements_off", "SQL statements per creation, layer off", "", None),
    ("record_bytes", "bytes of a finished order record (row, as stored)", "", None),
    ("answer_bytes", "bytes of its stored answer (response_body)", "", None),
    ("record_indexes", "indexes on the key table a creation maintains", "", None),
)


def database_costs(order: Callable[[str], None]) -> dict[str, float]:
    """Where the layer's remaining cost is, on PostgreSQL's side: WAL and statements per
    creation with the layer on and off, the size of what it stores, its indexes."""
    from django.db import connection
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext

    from fastpaths.unkeyed import LAYER_OFF
    from idempotency.models import IdempotencyKey

    values: dict[str, float] = {}
    with connection.cursor() as cursor:
        for mode in ("on", "off"):
            with override_settings(**(LAYER_OFF if mode == "off" else {})):
                with CaptureQueriesContext(connection) as queries:
                    order(str(uuid.uuid4()))
                values[f"statements_{mode}"] = len(queries)
                windows = []
                for _ in range(WAL_ROUNDS):
                    cursor.execute("SELECT pg_current_wal_lsn()")
                    (start,) = cursor.fetchone()
                    for _ in range(WAL_REQUESTS):
                        order(str(uuid.uuid4()))
                    cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [start])
                    windows.append(float(cursor.fetchone()[0]) / WAL_REQUESTS)
                values[f"wal_bytes_{mode}"] = min(windows)
        table = IdempotencyKey._meta.db_table
        cursor.execute(
            f'SELECT avg(pg_column_size(k.*)), avg(octet_length(k.response_body)) FROM "{table}" k'
            " WHERE k.recovery_point = 'finished' AND k.path = %s",
            [PATH],
        )
        row_bytes, answer_bytes = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s", [table])
        (indexes,) = cursor.fetchone()
    return values | {
        "record_bytes": float(row_bytes or math.nan),
        "answer_bytes": float(answer_bytes or math.nan),
        "record_indexes": float(indexes),
    }


def _prepare() -> Callable[[str], None]:
    """An order poster for a user and a product of this module's, made on first use."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from orders.models import Product
    from tools.bench.fixtures import seed_product

    user, _ = get_user_model().objects.get_or_create(username="keylayer")
    token, _ = Token.objects.get_or_create(user=user)
    if not Product.objects.filter(sku=SKU).exists():
        seed_product(SKU)
    return order_poster(token=str(token.key), sku=SKU)


def run_counted(count: int) -> None:
    """Every mode in turn, ``count`` requests each, stopping at each boundary: under
    callgrind the driver zeroes or dumps the counters at every stop, so this process
    prints a line and waits for one back."""
    from django.test import override_settings

    from fastpaths.unkeyed import LAYER_OFF

    order = _prepare()
    order(replay_key := str(uuid.uuid4()))
    for _ in range(WARMUP):
        order(str(uuid.uuid4()))
    for mode in MODES:
        print(f"ready {mode}", flush=True)
        sys.stdin.readline()
        with override_settings(**(LAYER_OFF if mode == "off" else {})):
            for _ in range(count):
                order(replay_key if mode == "replay" else str(uuid.uuid4()))
    print("done", flush=True)
    sys.stdin.readline()


def _dump_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def instructions_per_request(
    *, database_url: str, redis_url: str, requests: int = CALLGRIND_REQUESTS
) -> dict[str, float]:
    """Thousands of instructions per request by mode: ``run_counted`` under callgrind,
    the counters dumped between the modes."""
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    counted = [
        sys.executable,
        "-m",
        "tools.bench.keylayer",
        "--counted",
        "--requests",
        str(requests),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        child = subprocess.Popen(
            [*valgrind, f"--callgrind-out-file={Path(tmp) / 'cg.out'}", *counted],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert child.stdin is not None
        assert child.stdout is not None

        def control(*args: str) -> None:
            subprocess.run(
                ["callgrind_control", str(child.pid), *args], check=True, capture_output=True
            )

        totals: dict[str, int] = {}
        previous: str | None = None
        try:
            for line in child.stdout:
                words = line.split() or [""]
                if words[0] not in ("ready", "done"):
                    continue
                if previous is None:
                    control("--instr=on")
                else:
                    control(f"--dump={previous}")
                    dumps = sorted(Path(tmp).glob("cg.out*"), key=lambda p: p.stat().st_mtime)
                    totals[previous] = _dump_total(dumps[-1])
                control("--zero")
                previous = words[1] if words[0] == "ready" else None
                child.stdin.write("go\n")
                child.stdin.flush()
                if words[0] == "done":
                    break
        finally:
            child.stdin.close()
            child.wait(timeout=120)
    return {mode: totals[mode] / requests / 1e3 for mode in MODES}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.keylayer", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", ""))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.callgrind:
        counted = instructions_per_request(
            database_url=args.database_url, redis_url=args.redis_url, requests=args.requests
        )
        keys = {"on": "layer_on", "off": "layer_off", "replay": "replay"}
        print(json.dumps({keys[mode]: value for mode, value in counted.items()}))
        return 0
    setup_django(database_url=args.database_url, redis_url=args.redis_url)
    if args.counted:
        run_counted(args.requests)
        return 0
    times = service_times(_prepare(), iterations=args.requests)
    print(json.dumps({**times, "on/off": round(times["off"] / times["on"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
