"""``python -m tools.bench`` (``make bench``): run the suites and report.

    python -m tools.bench            # 2 s warm-up + 10 s measured per scenario
    python -m tools.bench --quick    # 0.5 s + 2 s: a smoke run
    BENCH_SECONDS=30 python -m tools.bench --suite orders

Exits 0 whether or not a target is met: the figures are for reading (a missed
target prints MISS); correctness is asserted by the test suite.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback

from tools.bench import inprocess
from tools.bench.context import BenchContext, Suite, SuiteResult, parse_options
from tools.bench.database import BENCH_DATABASE
from tools.bench.report import finish, markdown, write
from tools.bench.standalone import OUT_DIR, prepare


def select(names: tuple[str, ...]) -> list[Suite]:
    """The suites named (all of them when none is), in the order a run takes them.
    Suites import Django models: call this only once Django is set up."""
    from tools.bench import callbacks, orders, pay, peers, reaper, reconcile_pass, statement

    # The two slow ones last: 10,000 unknown attempts, then a million expired keys.
    modules = (orders, pay, callbacks, peers, reconcile_pass, statement, reaper)
    suites = [module.SUITE for module in modules]
    if unknown := sorted(set(names) - {suite.name for suite in suites}):
        raise SystemExit(f"unknown suite(s) {unknown}; known: {sorted(s.name for s in suites)}")
    return [suite for suite in suites if not names or suite.name in names]


def run_suites(ctx: BenchContext) -> list[SuiteResult]:
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
    ctx, machine = prepare(BENCH_DATABASE, options)
    seconds = f"BENCH_SECONDS={os.environ['BENCH_SECONDS']} " if os.getenv("BENCH_SECONDS") else ""
    report = finish(
        command=seconds + shlex.join(["python", "-m", "tools.bench", *argv]),
        options=options,
        machine=machine,
        suites=run_suites(ctx),
        started=started,
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
