"""``python -m bench`` (``make bench``): run the registered suites and report.

    python -m bench            # 2 s warm-up + 10 s measured per scenario
    python -m bench --quick    # 0.5 s + 2 s: a smoke run
    BENCH_SECONDS=30 python -m bench --suite orders

Exits 0 whether or not a target is met: the figures are for reading (a missed
target prints MISS); correctness is asserted by the test suite.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback

from bench import database, inprocess
from bench.context import BenchContext, Options, SuiteResult, parse_options
from bench.report import RunReport, load_average, machine_info, markdown, write
from bench.standalone import OUT_DIR, service_urls


def command_line(argv: list[str], environ: dict[str, str]) -> str:
    prefix = f"BENCH_SECONDS={environ['BENCH_SECONDS']} " if environ.get("BENCH_SECONDS") else ""
    return prefix + shlex.join(["python", "-m", "bench", *argv])


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
            try:
                results.append(suite.run(ctx))
            except Exception:  # the other suites' figures are still worth a report
                traceback.print_exc()
                print(f"bench: {suite.title} FAILED; its figures are missing", flush=True)
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
