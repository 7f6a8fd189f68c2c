"""One chaos run, start to finish: prepare, shop under the nemesis, quiesce, check.

The run's database is ``<DATABASE_URL's name>_chaos`` on the same server,
dropped, created and migrated every time; its Redis is its own (unless
``--redis-url``), its files are under ``tools/chaos/out/``. With ``--topology
cluster`` the run starts ``make cluster``'s topology instead (tools/chaos/cluster.py):
its own PostgreSQL pair and database, REDIS_URL's Redis, a RabbitMQ virtual host
of its own.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import redis

from tools.bench import database
from tools.chaos.books import books_read
from tools.chaos.checker import Violation, check
from tools.chaos.cluster import ClusterDeployment, ClusterNemesis, free_port_block
from tools.chaos.customers import Budget, Customer, Shelf
from tools.chaos.deployment import ROOT, Deployment
from tools.chaos.desk import desk_act, desk_dismiss, desk_operators_create
from tools.chaos.history import History, history_read
from tools.chaos.nemesis import PAUSE_S, Nemesis
from tools.chaos.report import RunFigures, report_markdown

# The deployment's settings during the chaos phase (config/settings/ documents
# each). Shorter than the defaults so that a run of minutes sees every background
# path many times, and still in the proportions the defaults keep: the provider
# answers within 2 s, a lock is presumed dead after 20 s, the reconciler touches
# an attempt after 20 s and retries an unreachable provider after 2 s doubling
# to 20 s; a lease is 30 s (a batch ends well inside it).
RUN_SETTINGS = {
    "PROVIDER_TIMEOUT_S": "2",
    "IDEMPOTENCY_LOCK_TIMEOUT": "20",
    "RECONCILE_AFTER_S": "20",
    "RECONCILE_BACKOFF_BASE_S": "2",
    "RECONCILE_BACKOFF_CAP_S": "20",
    "RECONCILE_LEASE_S": "30",
    # A pass stops taking work after 20 s, and its job's single-runner lock lasts a
    # minute: a Celery pool process the nemesis kills mid-pass holds its job for that
    # long at most (the defaults' 240 s budget and 360 s lock would stall the quiesce).
    "RECONCILE_PASS_BUDGET_S": "20",
    "RECONCILE_LOCK_TTL_S": "60",
    "FULFIL_SWEEP_AFTER_S": "30",
    # A customer the provider waits for (requires_action) who walks away is fenced by
    # the reconciler after this long: within the run, as the others are settled.
    "PAYMENT_ACTION_TIMEOUT_S": "30",
    # Customers pay thousands of orders: their wallets never decline for want of money.
    "SANDBOX_WALLET_START": str(10**12),
    "LOG_LEVEL": "WARNING",
}
# Once the nemesis and the customers have stopped, nothing is in flight: the
# background work may take everything at once.
QUIESCE_SETTINGS = {
    **RUN_SETTINGS,
    "IDEMPOTENCY_LOCK_TIMEOUT": "5",
    "RECONCILE_AFTER_S": "0",
    "FULFIL_SWEEP_AFTER_S": "0",
    "PAYMENT_ACTION_TIMEOUT_S": "0",
}
STOCK = 1_000_000
# One product is scarce, so that out-of-stock answers and stock given back by
# cancellations meet the concurrency too.
SCARCE_STOCK_PER_ORDER = 0.05
QUEUE = "celery"
# Passes with nothing queued and nothing unresolved after which the run stops
# waiting for the audit to come clean (beat's passes run every 30 s meanwhile).
QUIET_PASSES = 5


@dataclass(frozen=True)
class RunOptions:
    orders: int
    clients: int
    seed: int
    duration_s: float
    base_port: int
    redis_url: str
    quiesce_timeout_s: float
    pace: float
    database: str  # "": <DATABASE_URL's name>_chaos
    out: Path
    command: str
    topology: str = "local"  # or "cluster"


class Run:
    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.out = options.out
        self.received: dict[str, int] = {}
        self.cluster = options.topology == "cluster"
        self.cluster_port = 0

    def execute(self) -> list[Violation]:
        self._fresh_out()
        env = self._environment()
        deployment = self._deployment(env, RUN_SETTINGS)
        history = History(self.out / "history.jsonl")
        restarts: dict[str, int] = {}

        def restarted(name: str) -> None:
            restarts[name] = restarts.get(name, 0) + 1
            history.record("phase", name="restarted", process=name)

        deployment.on_restart = restarted
        try:
            if isinstance(deployment, ClusterDeployment):
                say(f"starting the cluster on ports {self.cluster_port}.. ...")
                deployment.start()  # it migrates its own database: before the seed
                env = self._attach(deployment, env)
            customers, staff_token = self._seed(deployment, history)
        except BaseException:
            if isinstance(deployment, ClusterDeployment):  # it runs in its own session
                deployment.stop()
                deployment.remove_vhost()
            raise
        if not self.cluster:
            say(f"starting {len(deployment.processes)} processes ...")
        deployment.start()
        nemesis = (ClusterNemesis if self.cluster else Nemesis)(
            deployment=deployment,  # type: ignore[arg-type]
            history=history,
            seed=self.options.seed,
            database_url=os.environ["DATABASE_URL"],  # the primary's, directly
            staff_token=staff_token,
            pause_s=(PAUSE_S[0] * self.options.pace, PAUSE_S[1] * self.options.pace),
        )
        try:
            started = time.monotonic()
            history.record("phase", name="chaos")
            say(f"{len(customers)} customers, {self.options.orders} orders, nemesis on")
            nemesis.start()
            self._shop(customers)
            nemesis.stop()
            chaos_s = time.monotonic() - started
            if isinstance(deployment, ClusterDeployment):
                restarts.update(deployment.restarts())  # the cluster's runner restarts
            history.record("phase", name="quiesce", kills=dict(nemesis.counts))
            say(f"chaos phase over after {chaos_s:.0f} s: {dict(nemesis.counts)}; quiescing")
            deployment.wait_ready()  # the nemesis's last kill may still be restarting
            nemesis.clear_provider_faults()
            deployment.stop()
            deployment = self._deployment(env, QUIESCE_SETTINGS)
            deployment.start()
            quiesce_s, parked = self._quiesce(env, deployment)
            # The customers the client told to come back later do so now, with the
            # same keys; then the background work settles what they did.
            history.record("phase", name="come back")
            say("customers come back to what was never answered ...")
            self._customers_run([c.come_back for c in customers])
            again_s, parked = self._quiesce(env, deployment)
            quiesce_s += again_s
            # The person at the desk closes every case the run opened, on the record.
            history.record("phase", name="desk")
            if desk_act(history):
                again_s, parked = self._quiesce(env, deployment)
                quiesce_s += again_s
            desk_dismiss(history)
            history.record("phase", name="check", quiesce_s=quiesce_s, parked=parked)
            audit = self._manage(env, "audit")
            from django.db import connections

            books = books_read(received=self.received, audit=audit)
            connections.close_all()
        finally:
            nemesis.stop()  # when something above failed: a no-op otherwise
            deployment.stop()
            if isinstance(deployment, ClusterDeployment):
                deployment.remove_vhost()
            history.close()
        events = history_read(history.path)
        violations = check(events, books)
        figures = RunFigures(
            command=self.options.command,
            seed=self.options.seed,
            orders=self.options.orders,
            clients=self.options.clients,
            chaos_s=chaos_s,
            quiesce_s=quiesce_s,
            parked=parked,
            restarts=restarts,
        )
        text = report_markdown(figures, events, violations)
        (self.out / "report.md").write_text(text)
        print(text)
        say(f"report: {self.out / 'report.md'}; history: {history.path}")
        return violations

    # --- preparation -------------------------------------------------------------------

    def _fresh_out(self) -> None:
        stale_files = ("logs", "redis", "cluster", "history.jsonl", "report.md")
        for stale in (*stale_files, "celerybeat-schedule"):
            path = self.out / stale
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)

    def _environment(self) -> dict[str, str]:
        if self.cluster:
            self.cluster_port = self.options.base_port or free_port_block()
            os.environ.update(DEMO_MODE="true", DJANGO_SETTINGS_MODULE="config.settings")
            return dict(os.environ)
        server_url = os.environ["DATABASE_URL"]
        name = self.options.database or f"{database.database_name(server_url)}_chaos"
        say(f"recreating and migrating {name} ...")
        url = database.recreate(server_url, name)
        database.migrate(url)
        redis_url = self.options.redis_url or f"unix://{self.out / 'redis' / 'redis.sock'}"
        ports = self._ports()
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "REDIS_URL": redis_url,
            "DEMO_MODE": "true",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "SHOP_BASE_URL": f"http://127.0.0.1:{ports[0]}",
            "PROVIDER_BASE_URL": f"http://127.0.0.1:{ports[2]}/sandbox",
            "CHAOS_PORTS": ",".join(map(str, ports)),
        }
        os.environ.update(env)
        return env

    def _ports(self) -> list[int]:
        if self.options.base_port:
            return [self.options.base_port + offset for offset in range(3)]
        ports = []
        for _ in range(3):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                ports.append(int(probe.getsockname()[1]))
        return ports

    def _deployment(
        self, env: dict[str, str], settings: dict[str, str]
    ) -> Deployment | ClusterDeployment:
        if self.cluster:
            cluster = ClusterDeployment(
                port=self.cluster_port,
                env={**env, **settings},
                out=self.out,
                vhost=f"onceshop-chaos-{self.cluster_port}",
            )
            cluster.build()
            return cluster
        ports = [int(port) for port in env["CHAOS_PORTS"].split(",")]
        deployment = Deployment(
            shop_ports=(ports[0], ports[1]),
            provider_port=ports[2],
            env={**env, **settings},
            out=self.out,
            own_redis=not self.options.redis_url,
        )
        deployment.build()
        return deployment

    @staticmethod
    def _attach(cluster: ClusterDeployment, env: dict[str, str]) -> dict[str, str]:
        """The cluster's environment (through PgBouncer) for ``manage.py``; this
        process's own Django (the seed, the books) reads the primary directly."""
        state = cluster.state()
        os.environ["DATABASE_URL"] = state["primary"]
        os.environ.pop("DATABASE_REPLICA_URL", None)
        return {**env, **state["env"]}

    def _seed(
        self, deployment: Deployment | ClusterDeployment, history: History
    ) -> tuple[list[Customer], str]:
        """Users with tokens, a staff user for the provider's faults, the catalogue."""
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.db import connections
        from rest_framework.authtoken.models import Token

        from orders.models import Product
        from orders.services import product_create

        # What is already on the shelves counts as received (the cluster seeds the
        # demo's catalogue; the single-machine run's database starts empty).
        self.received.update(Product.objects.values_list("sku", "stock"))
        users = get_user_model().objects
        staff = users.create_user(username="chaos-staff", password=None, is_staff=True)
        staff_token = Token.objects.create(user=staff).key
        desk_operators_create()
        scarce = max(10, int(self.options.orders * SCARCE_STOCK_PER_ORDER))
        skus = []
        for index, stock in enumerate([STOCK, STOCK, STOCK, STOCK, scarce]):
            sku = f"CHAOS-{index + 1}"
            product_create(
                sku=sku,
                name=f"Chaos tea {index + 1}",
                price=100 + 997 * index,
                currency="CNY",
                stock=stock,
            )
            self.received[sku] = stock
            skus.append(sku)
        customers = []
        for index in range(self.options.clients):
            user = users.create_user(username=f"chaos-{index + 1:02d}", password=None)
            customers.append(
                Customer(
                    username=user.username,
                    token=Token.objects.create(user=user).key,
                    backends=deployment.shop_urls,
                    seed=self.options.seed * 1000 + index,
                    history=history,
                    shelf=Shelf(skus=skus),
                )
            )
        connections.close_all()
        return customers, staff_token

    # --- the phases --------------------------------------------------------------------

    def _shop(self, customers: list[Customer]) -> None:
        budget = Budget(
            orders=self.options.orders, deadline=time.monotonic() + self.options.duration_s
        )
        self._customers_run(
            [partial(c.run, budget) for c in customers],
            progress=lambda: f"{self.options.orders - budget.orders} orders started",
        )

    @staticmethod
    def _customers_run(
        calls: list[Callable[[], None]], progress: Callable[[], str] | None = None
    ) -> None:
        """Run each customer's ``call`` in its own thread until all are done."""
        # Daemons: an interrupted run (Ctrl-C, SIGTERM) exits without waiting for them.
        threads = [threading.Thread(target=call, daemon=True) for call in calls]
        for thread in threads:
            thread.start()
        last = time.monotonic()
        while any(thread.is_alive() for thread in threads):
            time.sleep(1)
            if progress is not None and time.monotonic() - last > 30:
                last = time.monotonic()
                say(progress())
        for thread in threads:
            thread.join()

    def _quiesce(
        self, env: dict[str, str], deployment: Deployment | ClusterDeployment
    ) -> tuple[float, int]:
        """Run reconciliation passes until nothing is unresolved: how long it took, and
        how many messages a killed worker left unacknowledged.

        Those messages are not waited for: the broker hands them out again only
        after its visibility timeout (an hour, config/settings/background.py). What
        they were for is done without them: the fulfil sweep ships, the reconciler
        settles unknown attempts, and the sandbox's sweep (run by every pass, see
        ``quiesce_commands``) makes the late successes, reversals and disputes
        they scheduled and sends the notifications they never sent. Nothing is
        quiet while the provider still has such a move scheduled, or the shop holds
        a notification it has not settled.
        Quiet passes with the audit still failing end the wait too: nothing in
        the background is left to change it, and the check will show why.
        """
        started = time.monotonic()
        backlog = _backlog(env, deployment)
        quiet = 0
        while True:
            said = "".join(self._manage(env, *command)[1] for command in quiesce_commands())
            queued, parked = backlog()
            left = _unresolved()
            quiet = quiet + 1 if not queued and not left else 0
            if quiet >= QUIET_PASSES or (quiet and self._manage(env, "audit")[0] == 0):
                return time.monotonic() - started, parked
            if time.monotonic() - started > self.options.quiesce_timeout_s:
                say(f"not quiescent after {self.options.quiesce_timeout_s:.0f} s: {left}")
                return time.monotonic() - started, parked
            held = [line.split(":")[0] for line in said.splitlines() if "holds its lock" in line]
            waiting = f"; waiting for the lock of {', '.join(held)}" if held else ""
            say(f"quiescing: {queued} messages queued, unresolved {left}{waiting}")
            time.sleep(2)

    def _manage(self, env: dict[str, str], *args: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**env, **QUIESCE_SETTINGS, "SANDBOX_ENABLED": "true"},
            capture_output=True,
            text=True,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr


def _backlog(
    env: dict[str, str], deployment: Deployment | ClusterDeployment
) -> Callable[[], tuple[int, int]]:
    """Messages still queued, and those a killed worker left unacknowledged.

    On RabbitMQ an unacknowledged message goes back to the queue as soon as its
    consumer's connection closes: both count as queued there."""
    if isinstance(deployment, ClusterDeployment):

        def amqp() -> tuple[int, int]:
            ready, unacked = deployment.queue_depth()
            return ready + unacked, unacked

        return amqp
    broker = redis.Redis.from_url(env["REDIS_URL"])
    return lambda: (int(broker.llen(QUEUE)), int(broker.hlen("unacked")))


def quiesce_commands() -> list[list[str]]:
    """The management commands one quiesce pass runs, in order.

    First the provider's own safety net, without its grace (the faults are
    over): a late success, a reversal or a dispute whose message a killed
    worker took with it is made now, not at beat's sweep minutes later, after
    the check. Then one pass of the periodic jobs, then the import and
    matching of today's provider statement (a capture no notification told
    the shop about is settled there); its discrepancies reach the check
    through ``manage.py audit`` (invariant 7).
    """
    today = time.strftime("%Y-%m-%d", time.gmtime())
    return [
        ["sandbox_sweep", "--after-s", "0"],
        ["reconcile", "--once"],
        ["reconcile_statement", "--date", today],
    ]


def _unresolved() -> dict[str, int]:
    """What still waits for the background work (Django set up on the run's database)."""
    from django.db import connections

    from callbacks.models import UNRESOLVED_OUTCOMES, ProviderNotification
    from demo.sandbox.services.sweeps import sandbox_scheduled_left
    from idempotency.models import IdempotencyKey, RecoveryPoint
    from orders.models import Order
    from payments.models import Payment, Refund
    from reconcile.desk.selectors import notifications_held

    live = ["PENDING", "UNKNOWN"]
    counts = {
        # Money the provider will still move (a late success, a reversal, a dispute)
        # and what it told the shop that the shop has not settled yet: both are
        # the reconciler's work to come, so the check waits for them.
        "provider": sandbox_scheduled_left(),
        "notifications": ProviderNotification.objects.filter(
            outcome__in=UNRESOLVED_OUTCOMES, resolved_at__isnull=True
        )
        .exclude(pk__in=notifications_held())
        .count(),
        "records": IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED).count(),
        "payments": Payment.objects.filter(status__in=live).count(),
        "refunds": Refund.objects.filter(status__in=live).count(),
        "unshipped": Order.objects.filter(status="PAID", shipment__isnull=True).count(),
    }
    connections.close_all()
    return {name: count for name, count in counts.items() if count}


def say(message: str) -> None:
    print(f"chaos: {message}", flush=True)
