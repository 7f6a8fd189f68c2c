"""``python -m tools.lab [N ...]``: run the experiments (all, or those numbered) and report.

Creates and migrates the lab's own database (``<DATABASE_URL's name>_lab`` on
the same server), serves the shop in this process on a free loopback port,
runs the experiments, prints the table and writes it to ``tools/lab/out/results.md``.
Exits 1 if any OnceShop result shows damage (``Finding.damage``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def _environment() -> tuple[str, str]:
    """The lab's database URL and the port the shop will answer on; sets the env."""
    # A person reads the table: the shop it serves logs plain warnings to stderr,
    # not a JSON line per request between the lab's sentences (as `make lab` sets).
    os.environ.setdefault("LOG_FORMAT", "plain")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from config.embedded import ensure_environment

        ensure_environment()  # the embedded servers, stopped when this process exits
    from tools.bench import database
    from tools.lab.server import free_port

    server_url = os.environ["DATABASE_URL"]
    name = f"{database.database_name(server_url)}_lab"
    print(f"lab: recreating and migrating {name} ...", flush=True)
    lab_url = database.recreate(server_url, name)
    database.migrate(lab_url)
    port = free_port()
    os.environ.update(
        {
            "DATABASE_URL": lab_url,
            "DATABASE_CONN_MAX_AGE": "0",  # many short-lived threads: no lingering sessions
            "CELERY_QUEUE": "onceshop-lab",  # tasks nobody consumes: never the demo's worker
            "PROVIDER_BASE_URL": f"http://127.0.0.1:{port}/sandbox",
            "SHOP_BASE_URL": f"http://127.0.0.1:{port}",
            "PROVIDER_TIMEOUT_S": "2",
            "SANDBOX_ENABLED": "true",
            "DEMO_MODE": "true",
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
    )
    return name, str(port)


def main(argv: list[str]) -> int:
    try:
        wanted = [int(arg) for arg in argv] or list(range(1, 11))
    except ValueError:
        print("usage: python -m tools.lab [EXPERIMENT NUMBER ...]  (1-10)", file=sys.stderr)
        return 2
    if any(number not in range(1, 11) for number in wanted):
        print("experiments are numbered 1 to 10", file=sys.stderr)
        return 2
    name, port = _environment()
    warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
    import django

    django.setup()
    from edge.redis import redis_client
    from tools.lab.context import Lab, Scale
    from tools.lab.experiments import MODULES, runner
    from tools.lab.report import exit_status, markdown_table, results_markdown
    from tools.lab.server import serving

    findings = []
    try:
        with serving(int(port)) as base_url:
            # The experiments provoke 5xx and 4xx answers and provider faults on
            # purpose: not news here. (After serving: the WSGI app's set-up
            # configures logging again.)
            logging.getLogger("django.request").setLevel(logging.CRITICAL)
            logging.getLogger("sandbox").setLevel(logging.WARNING)
            lab = Lab(base_url=base_url, scale=Scale())
            for number in wanted:
                print(f"lab: {number}. {MODULES[number].MISTAKE} ...", end=" ", flush=True)
                started = time.monotonic()
                finding = runner(number)(lab)
                seconds = time.monotonic() - started
                findings.append(replace(finding, seconds=seconds))
                print(f"{seconds:.1f} s", flush=True)
    finally:
        redis_client().delete("onceshop-lab")  # the tasks the experiments enqueued
    print()
    print(markdown_table(findings))
    OUT.mkdir(exist_ok=True)
    (OUT / "results.md").write_text(results_markdown(findings, database=name))
    print(f"lab: written to {OUT / 'results.md'}")
    for finding in findings:
        if finding.damage:
            print(
                f"lab: experiment {finding.number}: OnceShop's side did not hold: "
                + "; ".join(finding.damage),
                file=sys.stderr,
            )
    return exit_status(findings)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
