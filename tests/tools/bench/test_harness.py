"""The bench's pure parts: statistics, targets, the pgbench script and its output,
the pay and callback suites' plans, phase timing and signed notifications.

No benchmark runs here: no server, no load, no database.
"""

import json
import math
import os
import re
from collections import deque
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from demo.sandbox.delivery import encode_body
from payments.providers import Notification, NotificationSignatureInvalid
from payments.providers.sandbox import SandboxProvider
from tools.bench import appserver, callbacks, database, fixtures, harness, keylayer, orders, pay
from tools.bench.context import Section, SuiteResult, parse_options
from tools.bench.fixtures import Attempt, Payer
from tools.bench.harness import HttpRequest
from tools.bench.inprocess import Probe, Stopwatch, phase_rows
from tools.bench.markdown import table
from tools.bench.orders import OrderFixture, Step, attribute, layer_of, order_create_script
from tools.bench.pay import QUERY_BUDGET_TEST, pinned_constant
from tools.bench.report import Machine, RunReport, markdown, metrics_table, to_json
from tools.bench.stats import Metric, Sample, Target, in_window, percentile, ratio, summarize

FIXTURE = OrderFixture(
    user_id=7, first_product_id=3, products=16, sku_prefix="BENCH-", price=1999, currency="CNY"
)
SCRIPT_PATH = Path("tools/bench/out/order-create.sql")


def sample(at: float, latency_ms: float, status: int = 201, expected: bool = True) -> Sample:
    return Sample(finished_at=at, latency_s=latency_ms / 1000, status=status, expected=expected)


# --- Statistics -------------------------------------------------------------------------------


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]  # 1..100

    assert percentile(values, 0.50) == 50
    assert percentile(values, 0.95) == 95
    assert percentile(values, 0.99) == 99
    assert percentile(values, 1.0) == 100
    assert percentile([4.0], 0.99) == 4.0
    assert percentile(values, 0.0) == 1


def test_percentile_of_nothing_is_nan_and_bad_fractions_are_refused():
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError, match="must be within"):
        percentile([1.0], 95)


def test_only_answers_inside_the_window_count():
    samples = [sample(0.5, 1), sample(2.0, 1), sample(11.99, 1), sample(12.0, 1)]

    assert [s.finished_at for s in in_window(samples, 2.0, 12.0)] == [2.0, 11.99]


def test_summary_counts_only_2xx_as_throughput_and_reports_the_rest():
    samples = [
        *(sample(1.0, ms) for ms in (10, 20, 30, 40)),
        sample(1.0, 5, status=409),
        sample(1.0, 1, status=0),  # no answer
        sample(1.0, 50, expected=False),  # a 2xx of the wrong kind
    ]

    result = summarize(name="n", label="l", samples=samples, seconds=2.0)

    assert result.ok == 5
    assert result.per_second == 2.5
    assert (result.non_2xx, result.errors, result.unexpected) == (1, 1, 1)
    assert result.p50_ms == pytest.approx(30)
    assert result.p99_ms == pytest.approx(50)
    assert result.statuses == {"201": 5, "409": 1}


def test_summary_of_a_silent_run_has_nan_latencies_and_zero_throughput():
    result = summarize(name="n", label="l", samples=[sample(1.0, 3, status=500)], seconds=1.0)

    assert result.per_second == 0
    assert math.isnan(result.p95_ms)
    with pytest.raises(ValueError, match="longer than zero"):
        summarize(name="n", label="l", samples=[], seconds=0)


def test_ratios_and_verdicts():
    assert ratio(300, 100) == 3
    assert math.isnan(ratio(1, 0))

    replay = Target(">=", 2.5)
    queries = Target("<=", 2)
    assert Metric("r", "r", 2.5, target=replay).verdict == "PASS"
    assert Metric("r", "r", 2.49, target=replay).verdict == "MISS"
    assert Metric("r", "r", math.nan, target=replay).verdict == "MISS"
    assert Metric("q", "q", 3, target=queries).verdict == "MISS"
    assert Metric("x", "x", 0.3).verdict == "-"
    assert str(replay) == ">= 2.5"


# --- The raw SQL script ------------------------------------------------------------------------


def test_script_runs_the_writes_of_one_order_in_one_transaction_in_the_apps_order():
    statements = [
        line.split("(")[0].strip()
        for line in order_create_script(FIXTURE).splitlines()
        if re.match(r"(BEGIN|COMMIT|INSERT|UPDATE|SELECT)", line)
    ]

    # As order_create: the stock is taken last, so its row lock is held the shortest;
    # then, as single_phase does, the key record, finished, with its answer.
    assert statements == [
        "BEGIN;",
        "INSERT INTO orders_order",
        "INSERT INTO orders_orderline",
        "INSERT INTO orders_inventorymovement",
        "UPDATE orders_product SET stock = stock - 1 WHERE id = :product_id AND stock >= 1;",
        "INSERT INTO idempotency_idempotencykey",
        "COMMIT;",
    ]


def test_script_uses_only_variables_it_defines():
    script = order_create_script(FIXTURE)
    defined = set(re.findall(r"^\\set (\w+)", script, re.MULTILINE))
    defined |= {"order_id"}  # RETURNING ... \gset
    defined |= {"client_id"}  # pgbench's own: the client's number, from 0
    # pgbench substitutes ":name" anywhere, string literals included; "::" is a cast.
    used = set(re.findall(r"(?<!:):([A-Za-z_]\w*)", script))

    assert used == defined
    assert "\\set user_id 7\n" in script


def _pgbench_sets(script: str, client_id: int) -> dict[str, int]:
    """Evaluate the script's ``\\set`` lines (an integer, or ``a + b`` / ``a % b``)
    as pgbench would for one client."""
    values = {"client_id": client_id}

    def term(token: str) -> int:
        return values[token[1:]] if token.startswith(":") else int(token)

    for name, expression in re.findall(r"^\\set (\w+) (.+)$", script, re.MULTILINE):
        match expression.split():
            case [single]:
                values[name] = term(single)
            case [left, "+", right]:
                values[name] = term(left) + term(right)
            case [left, "%", right]:
                values[name] = term(left) % term(right)
            case _:
                raise AssertionError(f"unexpected pgbench expression {expression!r}")
    return values


def test_each_pgbench_client_buys_its_own_product_like_the_http_clients():
    script = order_create_script(FIXTURE)

    chosen = [_pgbench_sets(script, client) for client in range(16)]

    assert [values["product_id"] for values in chosen] == list(range(3, 19))
    assert [values["sku_number"] for values in chosen] == list(range(1, 17))  # BENCH-1..16
    assert "'BENCH-' || :sku_number" in script
    assert _pgbench_sets(script, 16)["product_id"] == 3  # more clients than products: shared


def test_with_one_product_every_pgbench_client_buys_it():
    script = order_create_script(replace(FIXTURE, products=1))

    assert {_pgbench_sets(script, client)["product_id"] for client in range(16)} == {3}
    with pytest.raises(ValueError, match="at least one product"):
        order_create_script(replace(FIXTURE, products=0))


def test_script_keys_and_numbers_are_unique_per_transaction():
    script = order_create_script(FIXTURE)

    # (user, key), (user, idempotency_key) and number all derive from the transaction id.
    assert script.count("'pgbench-' || pg_current_xact_id()") == 2
    assert script.count("'PGB-' || pg_current_xact_id()") == 3
    assert "'finished', 201" in script  # the record is written once, with its answer


def test_script_refuses_values_that_would_need_quoting():
    with pytest.raises(ValueError, match="refusing to embed"):
        order_create_script(replace(FIXTURE, sku_prefix="x'; DROP TABLE orders_order; --"))


# --- pgbench command and output --------------------------------------------------------------

PGBENCH_OUTPUT = """\
pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: order-create.sql
number of transactions actually processed: 11690
number of failed transactions: 2 (0.017%)
latency average = 13.688 ms
initial connection time = 20.352 ms
tps = 1168.978780 (without initial connection time)
"""


def test_pgbench_output_and_log_are_parsed():
    assert orders.parse_tps(PGBENCH_OUTPUT) == pytest.approx(1168.97878)
    assert orders.parse_failed(PGBENCH_OUTPUT) == 2
    assert orders.parse_log(["0 1 1500 0 1700000000 123", "1 2 failed 0 1700000000 5", ""]) == [
        0.0015
    ]
    with pytest.raises(ValueError, match="no tps line"):
        orders.parse_tps("pgbench: error: connection refused")


def test_pgbench_command_is_prepared_no_vacuum_and_time_bounded():
    url = "postgres://postgres@%2Fsome%2Fsocket/onceshop_bench"

    args = orders.pgbench_command("pgbench", url, SCRIPT_PATH, 16, 10, log_prefix=None)

    assert args[1:] == [
        "-n",
        "-M",
        "prepared",
        "-c",
        "16",
        "-j",
        "2",
        "-T",
        "10",
        "-f",
        str(SCRIPT_PATH),
        "postgresql://postgres@%2Fsome%2Fsocket/onceshop_bench",
    ]


# --- Database URL, server, options -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgres://postgres@127.0.0.1:5432/onceshop_bench",
        ),
        (
            "postgresql://postgres@%2Fwork%2F.var%2Fpg/onceshop?sslmode=disable",
            "postgresql://postgres@%2Fwork%2F.var%2Fpg/onceshop_bench?sslmode=disable",
        ),
    ],
)
def test_bench_database_is_on_the_same_server(url, expected):
    assert database.with_database(url, database.BENCH_DATABASE) == expected


def test_the_bench_database_is_never_dropped_from_itself():
    url = "postgres://u:p@db:5432/onceshop_bench"

    assert database.maintenance_url(url) == "postgres://u:p@db:5432/postgres"
    assert database.maintenance_url("postgres://u@db/shop") == "postgres://u@db/shop"
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        database.with_database("sqlite:///db.sqlite3", "x")


def test_gunicorn_runs_as_deployed_with_throttling_out_of_the_way():
    command = appserver.gunicorn_command(8123)
    env = appserver.app_env(
        database_url="postgres://x/onceshop_bench",
        redis_url="redis://r",
        overrides={"IDEMPOTENCY_ENABLED": "false"},
    )

    assert command[1:] == [
        "config.wsgi:application",
        "--config",
        "python:config.gunicorn",
        "--worker-class",
        "gthread",
        "--workers",
        "2",
        "--threads",
        "8",
        "--bind",
        "127.0.0.1:8123",
    ]
    assert env["IDEMPOTENCY_ENABLED"] == "false"
    assert env["DEBUG"] == "false"
    assert int(env["API_THROTTLE_RATE"].split("/")[0]) >= 10**8


def test_options_quick_and_bench_seconds():
    assert parse_options([], {}).measure_s == 10
    assert parse_options(["--quick"], {}).measure_s == 2
    assert parse_options([], {"BENCH_SECONDS": "30"}).measure_s == 30
    assert parse_options(["--suite", "orders"], {}).suites == ("orders",)
    assert parse_options([], {}).clients == 16


# --- Profile attribution and tables -----------------------------------------------------------


def frame(function: str, path: str) -> str:
    return f"{function}\x00{path}\x0042"


def test_time_goes_to_the_innermost_frame_outside_the_standard_library():
    site = "/venv/lib/python3.11/site-packages"
    stdlib_socket = frame("recv_into", "<built-in>")
    db_stack = [
        frame("post", f"{site}/django/test/client.py"),
        frame("wait", f"{site}/psycopg/x.py"),
    ]
    redis_stack = [frame("get", f"{site}/redis/client.py"), stdlib_socket]
    steps: list[Step] = [("wait", "wait", "psycopg/")]

    by_layer, by_step = attribute([(db_stack, 0.003), (redis_stack, 0.001)], steps)

    assert layer_of(db_stack).startswith("PostgreSQL")
    assert layer_of(redis_stack).startswith("Redis")
    assert [(label[:5], share) for label, _, share in by_layer] == [
        ("Postg", 0.75),
        ("Redis", 0.25),
    ]
    assert [(label, seconds) for label, seconds, _ in by_step] == [("wait", 0.003)]


def test_tables_line_up():
    text = table(["name", "req/s"], [["first", "1.0"], ["replay", "300.5"]])

    assert text.splitlines() == [
        "| name   | req/s |",
        "| ------ | ----: |",
        "| first  |   1.0 |",
        "| replay | 300.5 |",
    ]


# --- Report --------------------------------------------------------------------------------


def test_report_renders_any_suite_and_its_json_has_no_nan():
    silent = summarize(name="s", label="silent scenario", samples=[], seconds=1.0)
    suite = SuiteResult(
        name="demo",
        title="Demo suite",
        throughputs=[silent],
        metrics=[Metric("r", "a ratio", 3.0, "x", Target(">=", 2.5))],
        sections=[Section("Notes", "- one")],
    )
    machine = Machine(
        date="2026-01-01 00:00 UTC",
        nproc=2,
        cpu_model="cpu",
        memory="1 kB",
        postgres="PostgreSQL 16",
        python="CPython 3.11",
        packages={"django": "5.2"},
        load_average_before="0.00 0.00 0.00",
    )
    run = RunReport(
        command="python -m tools.bench --quick",
        options=parse_options(["--quick"], {}),
        machine=machine,
        suites=[suite],
        wall_s=12.0,
        load_average_after="0.10 0.00 0.00",
    )

    text = markdown(run)
    data = json.loads(to_json(run))

    assert "## Demo suite" in text
    assert "| a ratio | 3.00x | >= 2.5 | PASS    |" in text
    assert "### Notes\n\n- one" in text
    assert data["suites"][0]["throughputs"][0]["p50_ms"] is None
    assert data["suites"][0]["metrics"][0]["value"] == 3.0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_cpu_of_a_process_tree_is_read_from_proc():
    assert appserver.tree_cpu_seconds(os.getpid()) > 0


def test_database_sessions_are_classified_and_averaged():
    blocked = ("active", "Lock")
    running = ("active", None)
    holding = ("idle in transaction", "Client")
    idle = ("idle", "Client")

    means = harness.mean_counts([[blocked, blocked, running], [holding, idle, blocked]])

    assert means == {"running": 0.5, "lock wait": 1.5, "idle in transaction": 0.5, "idle": 0.5}
    assert harness.mean_counts([]) == dict.fromkeys(harness.STATES, 0.0)


def test_a_figure_that_could_not_be_measured_reads_n_a():
    metric = Metric("r", "a ratio", ratio(1, 0), "x", Target(">=", 2.5))

    assert "| a ratio |   n/a | >= 2.5 | MISS    |" in metrics_table([metric])


# --- Pay and callback suites: sizing, plans, phases, signatures ---------------------------


def test_pre_created_rows_cover_the_rate_bound_for_warm_up_and_measurement():
    assert fixtures.rows_needed(rate_bound=100, seconds=12, clients=16) == 75
    assert fixtures.rows_needed(rate_bound=250, seconds=12, clients=16) == 188  # rounded up
    assert fixtures.rows_needed(rate_bound=250, seconds=12) == 3000  # one pool for all
    assert fixtures.rows_needed(rate_bound=1, seconds=0.1, clients=16) == 1


def test_the_bench_queue_is_deleted_with_its_kombu_routing_keys():
    assert fixtures.queue_keys("onceshop-bench-pay") == [
        "onceshop-bench-pay",
        "_kombu.binding.onceshop-bench-pay",
        "_kombu.binding_permanent.onceshop-bench-pay",
    ]


def test_the_stopwatch_times_probed_functions_and_puts_them_back():
    target = SimpleNamespace(work=lambda x: x * 2, phase=lambda record: record)
    original = target.work
    stopwatch = Stopwatch()
    probes = [
        Probe(target, "work", "work"),
        Probe(target, "phase", lambda record: f"phase {record}"),  # label from the arguments
    ]

    with stopwatch.probing(probes):
        assert target.work(21) == 42
        target.phase(1), target.phase(2), target.phase(2)

    assert target.work is original
    assert set(stopwatch.seconds) == {"work", "phase 1", "phase 2"}
    assert all(seconds >= 0 for seconds in stopwatch.seconds.values())


def test_the_stopwatch_restores_even_when_the_block_raises():
    target = SimpleNamespace(work=lambda: 1)
    original = target.work

    with pytest.raises(RuntimeError), Stopwatch().probing([Probe(target, "work", "w")]):
        raise RuntimeError

    assert target.work is original


def test_phase_rows_give_the_remainder_and_show_nested_details_without_subtracting():
    seconds = {"a": 0.2, "b": 0.5, "inside b": 0.1}

    rows = phase_rows(
        seconds,
        phases=["a", "b"],
        nested=["inside b"],
        remainder="rest",
        total_s=1.0,
        iterations=10,
    )

    assert rows == [
        ("a", pytest.approx(20.0), pytest.approx(0.2)),
        ("b", pytest.approx(50.0), pytest.approx(0.5)),
        ("rest", pytest.approx(30.0), pytest.approx(0.3)),
        ("- inside b", pytest.approx(10.0), pytest.approx(0.1)),
    ]
    with pytest.raises(ValueError, match="nothing was timed"):
        phase_rows({}, phases=[], remainder="rest", total_s=0, iterations=1)


def test_the_pinned_pay_query_count_is_read_from_the_test_that_pins_it():
    assert pinned_constant("A = 1\nPAY_QUERIES = 30  # why\nB = PAY_QUERIES\n", "PAY_QUERIES") == 30
    assert pinned_constant("PAY_QUERIES = compute()\n", "PAY_QUERIES") is None
    assert isinstance(pinned_constant(QUERY_BUDGET_TEST.read_text(), "PAY_QUERIES"), int)


def _payer(index: int) -> Payer:
    return Payer(user_id=index, username=f"p{index}", token=f"t{index}")


def test_each_pay_client_pays_its_own_orders_with_fresh_keys_until_it_has_none():
    plan = pay.Plan("pay", payers=[_payer(1), _payer(2)], orders=[["A1", "A2"], ["B1"]])
    factory = plan.fresh()

    first, second = factory(0, 0), factory(0, 1)
    assert first is not None
    assert second is not None
    assert (first.path, second.path) == ("/api/v1/orders/A1/pay/", "/api/v1/orders/A2/pay/")
    assert first.headers["Authorization"] == "Token t1"
    assert first.headers["Idempotency-Key"] != second.headers["Idempotency-Key"]
    assert first.expect_headers == {"Idempotent-Replayed": "false"}
    assert factory(0, 2) is None  # out of orders: the client stops
    assert plan.out_of_orders() == 1  # client 0; client 1 has not paid yet
    assert [number for number, _ in plan.sent[0]] == ["A1", "A2"]


def test_a_signed_bench_notification_is_accepted_by_the_shops_verifier():
    attempt = Attempt(out_trade_no="P20260101ABCDEF", amount=1999, currency="CNY")
    notice = callbacks.success_notice(attempt, paid_at=datetime(2026, 1, 1, tzinfo=UTC))
    headers = callbacks.signed_headers(notice.body, secret="whsec-test")
    verifier = SandboxProvider(
        base_url="http://unused", api_key="k", timeout_s=1, webhook_secrets=["whsec-test"]
    )

    notification = verifier.verify_notification(headers=headers, raw_body=notice.body)

    assert isinstance(notification, Notification)  # no ``event``: a charge's
    assert notification.notify_id == notice.notify_id
    assert (notification.out_trade_no, notification.amount) == ("P20260101ABCDEF", 1999)
    assert notification.trade_status == "SUCCESS"
    assert notice.body == encode_body(json.loads(notice.body))  # the sandbox's exact bytes
    with pytest.raises(NotificationSignatureInvalid):
        verifier.verify_notification(headers=headers, raw_body=notice.body + b" ")


def test_callback_clients_take_notifications_from_one_pool_until_it_is_empty():
    notices = [callbacks.Notice("N1", b"{}"), callbacks.Notice("N2", b"[]")]
    plan = callbacks.CallbackPlan(pool=deque(notices), secret="s", clients=2)
    factory = callbacks.fresh_notifications(plan)

    request = factory(1, 0)
    assert request is not None
    assert request.body == b"{}"
    assert request.headers["Sandbox-Signature"].startswith("t=")
    assert factory(0, 0) is not None
    assert factory(0, 1) is None  # the pool is empty: every client stops
    assert plan.sent == [[notices[1]], [notices[0]]]  # each client keeps what it sent
    assert (plan.size, len(plan.pool)) == (2, 0)


def test_order_clients_spread_over_the_catalogue_or_share_the_hot_product():
    spread = [f"BENCH-{i}" for i in range(1, 17)]

    spread_orders, hot_orders = (
        orders.order_requests("t", spread),
        orders.order_requests("t", ["BENCH-HOT"]),
    )

    def sku(request: HttpRequest) -> str:
        return json.loads(request.body)["lines"][0]["sku"]

    assert [sku(spread_orders(client, 0)) for client in (0, 15)] == ["BENCH-1", "BENCH-16"]
    assert {sku(hot_orders(client, 0)) for client in range(16)} == {"BENCH-HOT"}
    replays = orders.order_requests("t", spread, [["k1", "k2"]] * 16, replayed=True)
    assert [replays(3, n).headers["Idempotency-Key"] for n in range(3)] == ["k1", "k2", "k1"]
    assert replays(3, 0).expect_headers == {"Idempotent-Replayed": "true"}
    assert json.loads(keylayer.order_body("BENCH-3")) == {
        "lines": [{"sku": "BENCH-3", "quantity": 1}]
    }
