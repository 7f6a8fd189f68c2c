"""Setting up a run (services, a fresh migrated database, Django, the bench user),
for ``make bench`` and for the suites that also run alone
(``python -m tools.bench.reconcile_pass``, ``python -m tools.bench.reaper``, ...)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from tools.bench import database, inprocess
from tools.bench.context import BenchContext, Options, SuiteResult, parse_options
from tools.bench.report import Machine, finish, machine_info, markdown

OUT_DIR = Path(__file__).resolve().parent / "out"


def service_urls() -> tuple[str, str]:
    """DATABASE_URL and REDIS_URL, starting the embedded servers for those unset."""
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from config.embedded import ensure_environment

        ensure_environment()  # stops what it started when this process exits
    return os.environ["DATABASE_URL"], os.environ["REDIS_URL"]


def prepare(database_name: str, options: Options) -> tuple[BenchContext, Machine]:
    """Database ``database_name`` recreated and migrated, Django set up on it, the
    bench user; and the machine as it is before the run."""
    server_url, redis_url = service_urls()
    print(f"bench: recreating and migrating {database_name} ...", flush=True)
    url = database.recreate(server_url, database_name)
    database.migrate(url)
    inprocess.setup_django(database_url=url, redis_url=redis_url)
    user_id, token = inprocess.create_bench_user()
    OUT_DIR.mkdir(exist_ok=True)
    ctx = BenchContext(
        options=options,
        database_url=url,
        redis_url=redis_url,
        out_dir=OUT_DIR,
        user_id=user_id,
        token=token,
    )
    return ctx, machine_info(database.server_version(url))


def standalone(
    *,
    name: str,
    database_name: str,
    argv: list[str],
    suite_run: Callable[[BenchContext, argparse.Namespace], SuiteResult],
) -> int:
    """Run one suite alone on a database of its own, dropped afterwards; print the
    same Markdown as ``make bench``."""
    parser = argparse.ArgumentParser(prog=f"python -m tools.bench.{name}")
    parser.add_argument("--quick", action="store_true", help="a smaller run")
    parser.add_argument("--size", type=int, default=None, help="how many rows / attempts")
    args = parser.parse_args(argv)
    started = time.monotonic()
    # A suite that drives HTTP load (the reconcile pass's ceiling) uses the bench's periods.
    options = parse_options(["--quick"] if args.quick else [], dict(os.environ))
    try:
        ctx, machine = prepare(database_name, options)
        result = suite_run(ctx, args)
        inprocess.close_connections()
        command = " ".join(["python", "-m", f"bench.{name}", *argv])
        print("\n" + markdown(finish(command, options, machine, [result], started)))
    finally:
        inprocess.close_connections()
        database.drop(service_urls()[0], database_name)
    return 0
