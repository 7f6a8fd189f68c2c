"""`make demo`: migrate, seed, then run web + worker + beat until Ctrl-C.

Run under ``config.embedded`` so DATABASE_URL / REDIS_URL point at real
services. Ctrl-C (or SIGTERM) stops every child and waits for it: nothing is
left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PORT = os.environ.get("PORT", "8000")


def _manage(*args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], check=True)


def main() -> int:
    os.environ.setdefault("DEMO_MODE", "true")
    os.environ.setdefault("SHOP_BASE_URL", f"http://127.0.0.1:{PORT}")
    os.environ.setdefault("PROVIDER_BASE_URL", f"http://127.0.0.1:{PORT}/sandbox")
    _manage("migrate", "--no-input", "-v", "0")
    _manage("collectstatic", "--no-input", "-v", "0")
    _manage("seed_demo")

    bin_dir = os.path.dirname(sys.executable)
    children = [
        # gthread: the shop calls the sandbox on this same server in the demo, so a
        # pay request must never wait for a worker that is busy with itself.
        subprocess.Popen(
            [
                os.path.join(bin_dir, "gunicorn"),
                "config.wsgi:application",
                "--bind",
                f"127.0.0.1:{PORT}",
                "--worker-class",
                "gthread",
                "--workers",
                "2",
                "--threads",
                "8",
                "--timeout",
                "60",
            ]
        ),
        subprocess.Popen(
            [
                os.path.join(bin_dir, "celery"),
                "-A",
                "config.celery:app",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
            ]
        ),
        subprocess.Popen(
            [
                os.path.join(bin_dir, "celery"),
                "-A",
                "config.celery:app",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                os.path.join(".var", "celerybeat-schedule"),
            ]
        ),
    ]
    print(
        f"\nOnceShop is running on http://127.0.0.1:{PORT}/  (Ctrl-C stops everything)\n",
        flush=True,
    )

    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping and all(child.poll() is None for child in children):
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
