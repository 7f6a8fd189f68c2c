"""``python -m tools.chaos``: deploy, shop under a nemesis, quiesce, check, report.

    python -m tools.chaos --orders 10000 --clients 16 --seed 7

Exits 0 when the history and the books agree and the audit is clean, 1 on any
violation (each printed with the requests that show it), 2 on bad arguments, 3 when
the cluster (``--topology cluster``) never became ready: an environment failure (the
machine's load, a port, the broker), not a verdict; nothing was tried.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from tools.chaos.cluster import ClusterNotReady
from tools.chaos.run import Run, RunOptions

OUT = Path(__file__).resolve().parent / "out"
# The exit statuses (see the module's docstring); 2 is argparse's own.
EXIT_VIOLATIONS = 1
EXIT_NEVER_READY = 3


def parse(argv: list[str]) -> RunOptions:
    parser = argparse.ArgumentParser(
        prog="python -m tools.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--orders", type=int, default=500, help="orders the customers start")
    parser.add_argument("--clients", type=int, default=16, help="concurrent customers")
    parser.add_argument("--seed", type=int, default=1, help="the nemesis's and customers' seed")
    parser.add_argument(
        "--duration", type=float, default=0, help="end the chaos phase after this many seconds"
    )
    parser.add_argument(
        "--base-port", type=int, default=0, help="first of 3 ports to serve on (default: free)"
    )
    parser.add_argument(
        "--redis-url", default="", help="use this Redis instead of the run's own (no restarts)"
    )
    parser.add_argument(
        "--pace", type=float, default=1.0, help="scale the nemesis's pauses (0.5: twice as often)"
    )
    parser.add_argument(
        "--database", default="", help="the run's database (default: <DATABASE_URL's>_chaos)"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where the history and logs go")
    parser.add_argument("--quiesce-timeout", type=float, default=900)
    parser.add_argument(
        "--topology",
        choices=["local", "cluster"],
        default="local",
        help="cluster: against make cluster's topology (tools/chaos/cluster.py)",
    )
    args = parser.parse_args(argv)
    if args.orders < 1 or args.clients < 1 or args.duration < 0 or args.pace <= 0:
        parser.error("--orders and --clients are at least 1, --duration and --pace positive")
    return RunOptions(
        orders=args.orders,
        clients=args.clients,
        seed=args.seed,
        duration_s=args.duration or float("inf"),
        base_port=args.base_port,
        redis_url=args.redis_url,
        quiesce_timeout_s=args.quiesce_timeout,
        pace=args.pace,
        database=args.database,
        out=args.out.resolve(),
        command="python -m tools.chaos " + shlex.join(argv),
        topology=args.topology,
    )


def _stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the deployment (its own process groups) is
    stopped by the run's ``finally`` rather than left running."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str]) -> int:
    options = parse(argv)
    _stop_on_sigterm()
    if not os.environ.get("DATABASE_URL") and options.topology == "local":
        from config.embedded import start_postgres

        server = start_postgres()  # the embedded one, as `make demo` uses
        os.environ["DATABASE_URL"] = server.url
        atexit.register(server.stop)
    run = Run(options)
    started = time.monotonic()
    try:
        violations = run.execute()
    except ClusterNotReady as error:  # raised only by the first start: nothing was tried
        print(f"chaos: no verdict, the cluster never became ready: {error}", file=sys.stderr)
        return EXIT_NEVER_READY
    print(f"chaos: {len(violations)} violation(s) in {time.monotonic() - started:.0f} s")
    return EXIT_VIOLATIONS if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
