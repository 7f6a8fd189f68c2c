"""The nemesis: one fault every few seconds, chosen from the run's seed.

Each kind is a thing that happens to real deployments:

- ``kill-shop-worker``: SIGKILL one gunicorn worker of a shop server (the master
  forks a new one); requests it was serving are cut off mid-way;
- ``kill-shop-master``: SIGKILL a shop server's master (its workers follow);
  the supervisor starts the server again;
- ``kill-celery``: SIGKILL a Celery pool process, at whatever task it is running
  (``acks_late``: the broker hands that message out again);
- ``kill-provider``: SIGKILL the provider's server: charges in flight get no answer;
- ``restart-redis``: SIGKILL Redis and start it again (broker, throttle counters,
  runner locks); only when the run owns its Redis;
- ``stop-redis``: stop Redis (SIGTERM) and keep it down a few seconds, then start
  it again: requests meanwhile meet a Redis that refuses them, and must get no 5xx
  but 503 with ``Retry-After`` (docs/design.md, "Redis down"); only when the run owns its Redis;
- ``terminate-backends``: ``pg_terminate_backend`` on a few of the app's
  database sessions, mid-transaction or idle;
- ``provider-faults``: arm one or more of the sandbox's fault modes (stacked),
  for charges or refunds, ``late_success`` included, ``requires_action`` for
  charges (the customer completes, abandons or walks away: tools/chaos/customers.py),
  and the money that moves after the fact: ``refund_reversal`` (a refund that fails
  after succeeding) for refunds, ``dispute_lost`` (a chargeback opened and lost) for
  charges;
- ``customers-must-act``: arm ``requires_action`` alone for the next few charges, so
  that every run (even a short one, whose few provider-faults strikes may draw other
  modes) has customers the provider waits for, some of whom walk away and are
  fenced after ``PAYMENT_ACTION_TIMEOUT_S``.

Every fault is written to the history with its time and what it hit.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import requests

from tools.bench.database import database_name, libpq_uri
from tools.chaos.deployment import Deployment
from tools.chaos.history import History

# Every fault mode of the sandbox (docs/design.md, "The sandbox provider"); each takes a
# charge or a refund.
FAULT_MODES = [
    "decline",
    "error_before_commit",
    "error_after_commit",
    "timeout_after_commit",
    "callback_duplicates",
    "callback_shuffle",
    "callback_drop",
    "late_success",
    "requires_action",
    "refund_reversal",
    "dispute_lost",
]
# The modes that mean something for one target only: a refund never waits for the
# customer, a charge is never reversed, a refund is never disputed.
ONLY_FOR = {"requires_action": "charge", "refund_reversal": "refund", "dispute_lost": "charge"}
# A pause between two faults is drawn from this range (seconds); --pace scales it.
PAUSE_S = (1.0, 4.0)
# How long stop-redis keeps Redis down: long enough for every customer to meet it
# (hundreds of requests), short enough that the broker's backlog clears at once.
REDIS_DOWN_S = (2.0, 6.0)
# Relative weights: provider faults are the cheapest and most varied, kills of whole
# servers the most disruptive.
WEIGHTS = {
    "provider-faults": 5,
    "customers-must-act": 2,
    "kill-shop-worker": 3,
    "kill-celery": 3,
    "terminate-backends": 3,
    "kill-shop-master": 1,
    "kill-provider": 1,
    "restart-redis": 1,
    "stop-redis": 1,
}


class Nemesis:
    def __init__(
        self,
        *,
        deployment: Deployment,
        history: History,
        seed: int,
        database_url: str,
        staff_token: str,
        pause_s: tuple[float, float] = PAUSE_S,
    ) -> None:
        self.pause_s = pause_s
        self.deployment = deployment
        self.history = history
        self.rng = random.Random(seed)
        self.database_url = database_url
        self.staff_token = staff_token
        self.counts: Counter[str] = Counter()
        # Fault modes not armed yet: each strike of provider-faults takes from these
        # first, so that even a short run meets every mode.
        self.modes_left = list(FAULT_MODES)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.weights = WEIGHTS
        self.kinds = {
            "provider-faults": self.provider_faults,
            "customers-must-act": self.customers_must_act,
            "kill-shop-worker": self.kill_shop_worker,
            "kill-celery": self.kill_celery,
            "terminate-backends": self.terminate_backends,
            "kill-shop-master": self.kill_shop_master,
            "kill-provider": self.kill_provider,
            "restart-redis": self.restart_redis,
            "stop-redis": self.stop_redis,
        }
        if not deployment.own_redis:
            del self.kinds["restart-redis"]  # not ours to restart
            del self.kinds["stop-redis"]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop striking, once every kind has struck at least once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        # Every kind once first, in a seeded order: even a short run meets them all
        # (stop() waits for this first round).
        first_round = list(self.kinds)
        self.rng.shuffle(first_round)
        weights = [self.weights[kind] for kind in self.kinds]
        while True:
            pause = self.rng.uniform(*self.pause_s)
            if self._stop.wait(pause):
                if not first_round:
                    return
                time.sleep(pause)  # finishing the first round, at the same pace
            if first_round:
                kind = first_round.pop()
                if not self.strike(kind):
                    first_round.append(kind)  # its target was restarting: again later
            else:
                self.strike(self.rng.choices(list(self.kinds), weights)[0])

    def strike(self, kind: str) -> bool:
        """Inject one fault of ``kind``; False if it missed (its target was restarting)."""
        action: Callable[[], dict[str, Any]] = self.kinds[kind]
        try:
            what = action()
        except Exception as error:
            self.history.record("nemesis", kind=kind, missed=repr(error))
            return False
        self.counts[kind] += 1
        self.history.record("nemesis", kind=kind, **what)
        return True

    # --- the faults --------------------------------------------------------------------

    def _kill(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)

    def kill_shop_worker(self) -> dict[str, Any]:
        server = self.deployment.processes[self.rng.choice(["shop-1", "shop-2"])]
        worker = self.rng.choice(server.children())
        self._kill(worker.pid)
        return {"target": server.name, "pid": worker.pid}

    def kill_shop_master(self) -> dict[str, Any]:
        server = self.deployment.processes[self.rng.choice(["shop-1", "shop-2"])]
        pid = server.pid
        self._kill(pid)
        return {"target": server.name, "pid": pid}

    def kill_celery(self) -> dict[str, Any]:
        worker = self.deployment.processes[self.rng.choice(["worker-1", "worker-2"])]
        pool = self.rng.choice(worker.children())
        self._kill(pool.pid)
        return {"target": worker.name, "pid": pool.pid}

    def kill_provider(self) -> dict[str, Any]:
        pid = self.deployment.processes["provider"].pid
        self._kill(pid)
        return {"target": "provider", "pid": pid}

    def restart_redis(self) -> dict[str, Any]:
        # SIGKILL: the supervisor starts it again from its append-only file.
        pid = self.deployment.processes["redis"].pid
        self._kill(pid)
        return {"target": "redis", "pid": pid}

    def stop_redis(self) -> dict[str, Any]:
        # Held down (the supervisor waits), then started from its append-only file.
        down_s = round(self.rng.uniform(*REDIS_DOWN_S), 1)
        self.deployment.stop_for("redis", down_s)
        return {"target": "redis", "down_s": down_s}

    def terminate_backends(self) -> dict[str, Any]:
        name = database_name(self.database_url)
        with psycopg.connect(libpq_uri(self.database_url), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid, state, pg_terminate_backend(pid) FROM ("
                "  SELECT pid, state FROM pg_stat_activity"
                "  WHERE datname = %s AND pid <> pg_backend_pid()"
                "    AND backend_type = 'client backend'"
                "  ORDER BY random() LIMIT %s) chosen",
                [name, self.rng.randint(1, 4)],
            ).fetchall()
        return {"target": "postgresql", "backends": [f"{pid}:{state}" for pid, state, _ in rows]}

    def provider_faults(self) -> dict[str, Any]:
        target = self.rng.choice(["charge", "charge", "refund"])
        armed = []
        fits = [m for m in FAULT_MODES if ONLY_FOR.get(m, target) == target]
        fresh = [m for m in self.modes_left if m in fits]
        count = self.rng.choice([1, 1, 2, 3])
        chosen = self.rng.sample(fresh, min(count, len(fresh)))
        chosen += self.rng.sample([m for m in fits if m not in chosen], count - len(chosen))
        for mode in chosen:
            if mode in self.modes_left:
                self.modes_left.remove(mode)
            fault = {"mode": mode, "target": target, "count": self.rng.randint(1, 5)}
            if mode in (
                "timeout_after_commit",
                "late_success",
                "callback_shuffle",
                "refund_reversal",
                "dispute_lost",
            ):
                # Past the shop's provider timeout (2 s) for a timeout; a late
                # success settles after at least a second (tools/chaos/books.py).
                fault["delay_s"] = round(self.rng.uniform(1.0, 4.0), 1)
            if mode == "callback_duplicates":
                fault["copies"] = self.rng.randint(2, 4)
            response = requests.post(
                f"{self.deployment.provider_url}/sandbox/v1/faults",
                json=fault,
                headers={"Authorization": f"Token {self.staff_token}"},
                timeout=10,
            )
            response.raise_for_status()
            armed.append(fault)
        return {"target": "provider", "faults": armed}

    def customers_must_act(self) -> dict[str, Any]:
        fault = {"mode": "requires_action", "target": "charge", "count": self.rng.randint(3, 8)}
        requests.post(
            f"{self.deployment.provider_url}/sandbox/v1/faults",
            json=fault,
            headers={"Authorization": f"Token {self.staff_token}"},
            timeout=10,
        ).raise_for_status()
        return {"target": "provider", "faults": [fault]}

    def clear_provider_faults(self) -> None:
        requests.delete(
            f"{self.deployment.provider_url}/sandbox/v1/faults",
            headers={"Authorization": f"Token {self.staff_token}"},
            timeout=10,
        ).raise_for_status()
