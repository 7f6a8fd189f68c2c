"""Kill a whole web node while customers pay, then check the books.

``python -m tools.cluster.nodekill`` against a running `make cluster` (run with
the per-user caps off, as tools/cluster/load.py says). ``--clients`` customers
each create an order and pay it, over and over, for ``--seconds``; every request
that gets no final answer (a connection cut, a 502/503 from HAProxy, a 409
``idempotency-key-in-use`` while the dead node's key lock runs out) is retried
with the same Idempotency-Key, as the contract asks. At ``--kill-at`` seconds
every process of one node (state.json's pids) gets SIGKILL at once; the runner
brings the node back. At the end it prints what the customers saw, then runs
``manage.py audit`` against the cluster once the reconciler has had its turn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import requests

from demo.cluster.runner import BASE_DIR, STATE_FILE
from tools.cluster.load import _product, _token

# Retried answers: nothing final was said about the key.
RETRY = {0, 409, 500, 502, 503, 504}
# A request whose node died holds its key until IDEMPOTENCY_LOCK_TIMEOUT (60 s):
# a retry keeps going well past that.
RETRY_FOR_S = 150.0


def _final(session: requests.Session, url: str, headers: dict[str, str], body: object) -> int:
    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        try:
            code = session.post(url, json=body, headers=headers, timeout=30).status_code
        except requests.RequestException:
            code = 0
        if code not in RETRY or time.monotonic() > deadline:
            return code
        time.sleep(1.0)  # a client's retry interval


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--kill-at", type=float, default=10)
    parser.add_argument("--node", type=int, default=2, help="which node (1-based)")
    parser.add_argument("--settle", type=float, default=90, help="seconds before the audit")
    args = parser.parse_args()
    state = json.loads(STATE_FILE.read_text())
    base = state["url"]
    staff = _token(base, "staff", "staff-runs-the-shop")
    tokens = [_token(base, "alice", "alice-pays-once"), _token(base, "bob", "bob-pays-once")]
    sku = _product(base, staff)
    seen: Counter[str] = Counter()
    paid: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + args.seconds

    def customer(index: int) -> None:
        session = requests.Session()
        auth = {"Authorization": f"Token {tokens[index % len(tokens)]}"}
        while time.monotonic() < stop_at:
            order_key, pay_key = uuid.uuid4().hex, uuid.uuid4().hex
            body = {"lines": [{"sku": sku, "quantity": 1}]}
            headers = {**auth, "Idempotency-Key": order_key}
            answer = None
            for _ in range(int(RETRY_FOR_S)):
                try:
                    answer = session.post(
                        f"{base}/api/v1/orders/", json=body, headers=headers, timeout=30
                    )
                except requests.RequestException:
                    answer = None
                if answer is not None and answer.status_code not in RETRY:
                    break
                time.sleep(1.0)
            if answer is None or answer.status_code != 201:
                with lock:
                    seen[f"create {answer.status_code if answer else 'lost'}"] += 1
                continue
            number = answer.json()["number"]
            code = _final(
                session,
                f"{base}/api/v1/orders/{number}/pay/",
                {**auth, "Idempotency-Key": pay_key},
                {},
            )
            with lock:
                seen[f"pay {code}"] += 1
                if code == 200:
                    paid.append(number)

    threads = [threading.Thread(target=customer, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    time.sleep(args.kill_at)
    victims = json.loads(STATE_FILE.read_text())["nodes"][args.node - 1]["pids"]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    print(f"killed node-{args.node}: {len(victims)} processes at once", flush=True)
    for thread in threads:
        thread.join()
    print(f"customers saw: {dict(seen)}; {len(paid)} orders paid", flush=True)
    time.sleep(args.settle)  # the reconciler and the abandoned-request sweep run
    env = {**os.environ, **state["env"]}
    audit = subprocess.run(
        [sys.executable, "manage.py", "audit"], env=env, cwd=BASE_DIR, check=False
    )
    return audit.returncode


if __name__ == "__main__":
    sys.exit(main())
