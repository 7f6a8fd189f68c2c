"""Running one suite alone (``python -m bench.reconcile_pass``, ``python -m bench.reaper``),
and the services every run needs. Shared by ``__main__`` and the standalone suites."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from bench import database, inprocess
from bench.context import BenchContext, SuiteResult

OUT_DIR = Path(__file__).resolve().parent / "out"


def service_urls() -> tuple[str, str]:
    """DATABASE_URL and REDIS_URL, starting the embedded servers for those unset."""
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from config.embedded import ensure_environment

        ensure_environment()  # stops what it started when this process exits
    return os.environ["DATABASE_URL"], os.environ["REDIS_URL"]


def standalone(
    *,
    name: str,
    database_name: str,
    argv: list[str],
    suite_run: Callable[[BenchContext, argparse.Namespace], SuiteResult],
) -> int:
    """Run one suite alone on its own database: create, migrate, run, print, drop.

    Prints the same Markdown as ``make bench``.
    """
    from bench.report import RunReport, load_average, machine_info, markdown

    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument("--size", type=int, default=None, help="how many rows / attempts")
    args = parser.parse_args(argv)
    started = time.monotonic()
    server_url, redis_url = service_urls()
    url = database.with_database(server_url, database_name)
    maintenance = database.libpq_uri(database.with_database(server_url, "postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database_name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database_name}"')
    try:
        print(f"bench: migrating {database_name} ...", flush=True)
        database.migrate(url)
        inprocess.setup_django(database_url=url, redis_url=redis_url)
        user_id, token = inprocess.create_bench_user()
        # The reconcile suite drives HTTP load for its ceiling: the bench's own periods.
        from bench.__main__ import parse_options

        # The reconcile suite drives HTTP load for its ceiling: the bench's own periods.
        options = parse_options(["--quick"] if args.quick else [], dict(os.environ))
        OUT_DIR.mkdir(exist_ok=True)
        ctx = BenchContext(
            options=options,
            database_url=url,
            redis_url=redis_url,
            out_dir=OUT_DIR,
            user_id=user_id,
            token=token,
        )
        machine = machine_info(database.server_version(url))
        result = suite_run(ctx, args)
        inprocess.close_connections()
        report = RunReport(
            command=" ".join(["python", "-m", f"bench.{name}", *argv]),
            options=options,
            machine=machine,
            suites=[result],
            wall_s=time.monotonic() - started,
            load_average_after=load_average(),
        )
        print("\n" + markdown(report))
    finally:
        inprocess.close_connections()
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database_name}" WITH (FORCE)')
    return 0
