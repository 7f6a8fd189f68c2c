"""What the Idempotency-Key layer costs one order creation, in instructions and time.

Wall time on a shared machine moves by tens of percent from minute to minute;
the number of instructions a request executes does not. This module runs N
first-time creations (layer on, layer off) or N replays in one process, and,
with ``--callgrind``, runs itself under valgrind twice (N and 3N requests) so
the difference is the cost of 2N requests with Django's start-up cancelled out::

    python -m bench.keylayer --database-url postgres://.../db   # a migrated database
    python -m bench.keylayer --database-url ... --callgrind     # instructions/request

The bench's order suite calls ``instructions_per_request`` for its report.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKU = "BENCH-KEYLAYER"
MODES = ("on", "off", "replay")
# Requests run before counting starts: connections opened, caches and imports warm.
WARMUP = 20
# valgrind runs Python about 50 times slower: 40 requests per measurement is enough,
# instruction counts do not vary from one request to the next.
CALLGRIND_REQUESTS = 40


def _poster(token: str) -> Callable[[str], None]:
    from bench.orders_inprocess import order_poster

    return order_poster(token=token, sku=SKU)


def _prepare() -> str:
    """The bench user's token and the product, created on first use."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from bench.fixtures import seed_product
    from orders.models import Product

    user, _ = get_user_model().objects.get_or_create(username="keylayer")
    token, _ = Token.objects.get_or_create(user=user)
    if not Product.objects.filter(sku=SKU).exists():
        seed_product(SKU)
    return str(token.key)


def run_counted(count: int) -> None:
    """Every mode in turn, ``count`` requests each, stopping at each boundary.

    Under callgrind the driver (``instructions_per_request``) zeroes or dumps the
    counters at every stop: this process prints a line and waits for one back.
    """
    from django.test import override_settings

    post = _poster(_prepare())
    post(replay_key := str(uuid.uuid4()))
    for _ in range(WARMUP):
        post(str(uuid.uuid4()))
    for mode in MODES:
        print(f"ready {mode}", flush=True)
        sys.stdin.readline()
        with override_settings(IDEMPOTENCY_ENABLED=mode != "off"):
            for _ in range(count):
                post(replay_key if mode == "replay" else str(uuid.uuid4()))
    print("done", flush=True)
    sys.stdin.readline()


@dataclass(frozen=True)
class Instructions:
    """Instructions per request (thousands), counted by valgrind's callgrind."""

    layer_on: float
    layer_off: float
    replay: float


def _dump_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def instructions_per_request(
    *, database_url: str, redis_url: str, requests: int = CALLGRIND_REQUESTS
) -> Instructions:
    """Run ``run_counted`` under callgrind; dump the counters between the modes."""
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        child = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "bench.keylayer",
                "--counted",
                "--requests",
                str(requests),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert child.stdin is not None
        assert child.stdout is not None
        control = ["callgrind_control", str(child.pid)]
        totals: dict[str, int] = {}
        previous: str | None = None
        try:
            for line in child.stdout:
                word = line.split()[0] if line.split() else ""
                if word not in ("ready", "done"):
                    continue
                if previous is None:
                    subprocess.run([*control, "--instr=on"], check=True, capture_output=True)
                else:
                    subprocess.run(
                        [*control, f"--dump={previous}"], check=True, capture_output=True
                    )
                    dumps = sorted(Path(tmp).glob("cg.out*"), key=lambda p: p.stat().st_mtime)
                    totals[previous] = _dump_total(dumps[-1])
                subprocess.run([*control, "--zero"], check=True, capture_output=True)
                previous = line.split()[1] if word == "ready" else None
                child.stdin.write("go\n")
                child.stdin.flush()
                if word == "done":
                    break
        finally:
            child.stdin.close()
            child.wait(timeout=120)
    per = {mode: totals[mode] / requests / 1e3 for mode in MODES}
    return Instructions(layer_on=per["on"], layer_off=per["off"], replay=per["replay"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.keylayer", description=__doc__)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", ""))
    parser.add_argument("--mode", choices=MODES, default="on")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.callgrind:
        result = instructions_per_request(
            database_url=args.database_url, redis_url=args.redis_url, requests=args.requests
        )
        print(json.dumps(result.__dict__))
        return 0
    from bench.inprocess import ms_per_call, setup_django

    setup_django(database_url=args.database_url, redis_url=args.redis_url)
    if args.counted:
        run_counted(args.requests)
        return 0
    from django.test import override_settings

    post = _poster(_prepare())
    post(replay_key := str(uuid.uuid4()))
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(3):  # alternate, so load from elsewhere hits every mode alike
        for mode in MODES:
            with override_settings(IDEMPOTENCY_ENABLED=mode != "off"):

                def one(mode: str = mode) -> None:
                    post(replay_key if mode == "replay" else str(uuid.uuid4()))

                times[mode].append(ms_per_call(one, args.requests // 3))
    summary = {mode: round(min(values), 3) for mode, values in times.items()}
    summary["on/off"] = round(summary["off"] / summary["on"], 3)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
