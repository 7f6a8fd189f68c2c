"""``python -m bench`` (``make bench``): run the registered suites and report.

    python -m bench            # 2 s warm-up + 10 s measured per scenario
    python -m bench --quick    # 0.5 s + 2 s: a smoke run
    BENCH_SECONDS=30 python -m bench --suite orders

Exits 0 whether or not a target is met: the figures are for reading (a missed
target prints MISS); correctness is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from bench import database, inprocess
from bench.context import BenchContext, Options, SuiteResult
from bench.report import RunReport, load_average, machine_info, markdown, write

OUT_DIR = Path(__file__).resolve().parent / "out"
DEFAULT_SECONDS, QUICK_SECONDS = 10.0, 2.0
DEFAULT_WARMUP_S, QUICK_WARMUP_S = 2.0, 0.5
CLIENTS = 16
PROFILE_ITERATIONS, QUICK_PROFILE_ITERATIONS = 300, 30


def parse_options(argv: list[str], environ: dict[str, str]) -> Options:
    """Options from the command line; ``BENCH_SECONDS`` overrides the measured period."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 s per scenario: a smoke run")
    parser.add_argument(
        "--suite", action="append", default=[], help="run only this suite (repeatable)"
    )
    args = parser.parse_args(argv)
    default = QUICK_SECONDS if args.quick else DEFAULT_SECONDS
    seconds = float(environ.get("BENCH_SECONDS") or default)
    if seconds <= 0:
        parser.error("BENCH_SECONDS must be positive")
    return Options(
        measure_s=seconds,
        warmup_s=QUICK_WARMUP_S if args.quick else DEFAULT_WARMUP_S,
        clients=CLIENTS,
        profile_iterations=QUICK_PROFILE_ITERATIONS if args.quick else PROFILE_ITERATIONS,
        quick=args.quick,
        suites=tuple(args.suite),
    )


def command_line(argv: list[str], environ: dict[str, str]) -> str:
    prefix = f"BENCH_SECONDS={environ['BENCH_SECONDS']} " if environ.get("BENCH_SECONDS") else ""
    return prefix + shlex.join(["python", "-m", "bench", *argv])


def service_urls() -> tuple[str, str]:
    """DATABASE_URL and REDIS_URL, starting the embedded servers for those unset."""
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from config.embedded import ensure_environment

        ensure_environment()  # stops what it started when this process exits
    return os.environ["DATABASE_URL"], os.environ["REDIS_URL"]


def prepare(options: Options) -> BenchContext:
    """A fresh, migrated bench database, Django set up on it, and the bench user."""
    server_url, redis_url = service_urls()
    print(f"bench: recreating and migrating {database.BENCH_DATABASE} ...", flush=True)
    bench_url = database.recreate(server_url)
    database.migrate(bench_url)
    inprocess.setup_django(database_url=bench_url, redis_url=redis_url)
    user_id, token = inprocess.create_bench_user()
    return BenchContext(
        options=options,
        database_url=bench_url,
        redis_url=redis_url,
        out_dir=OUT_DIR,
        user_id=user_id,
        token=token,
    )


def run_suites(ctx: BenchContext) -> list[SuiteResult]:
    from bench.suites import select  # imports Django models: only after setup

    results = []
    try:
        for suite in select(ctx.options.suites):
            print(f"bench: {suite.title} ...", flush=True)
            results.append(suite.run(ctx))
    finally:
        inprocess.close_connections()
    return results


def main(argv: list[str]) -> int:
    started = time.monotonic()
    options = parse_options(argv, dict(os.environ))
    OUT_DIR.mkdir(exist_ok=True)
    ctx = prepare(options)
    machine = machine_info(database.server_version(ctx.database_url))
    results = run_suites(ctx)
    report = RunReport(
        command=command_line(argv, dict(os.environ)),
        options=options,
        machine=machine,
        suites=results,
        wall_s=time.monotonic() - started,
        load_average_after=load_average(),
    )
    md_path, json_path = write(report, OUT_DIR)
    print("\n" + markdown(report))
    print(f"bench: wrote {md_path} and {json_path}", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # servers were stopped on the way out (try/finally)
        print("bench: interrupted", file=sys.stderr)
        sys.exit(130)
