"""The Stripe demo's provider as `make demo PAYMENT_PROVIDER=stripe` starts it.

The very command the runner starts (``demo.runner._provider``), started for real:
it listens on loopback only, as every other server of the demo does; what it
holds outlives a restart, as the demo's database does, so the books of a second
run still agree with it; and the banner's line about it is something a person
can use (a browser at its root meets a 401).
"""

from __future__ import annotations

import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stripe

from demo import runner
from tests.stripe_emulator import STARTUP_S

pytestmark = pytest.mark.slow

LISTEN = "0A"  # a socket's state in /proc/net/tcp*: listening


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening_addresses(port: int) -> set[str]:
    """Where something listens on ``port``, read from the kernel's socket tables."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == LISTEN and int(hex_port, 16) == port:
                found.add(address if len(address) == width else "?")
    return found


IPV4_LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp spells it (little-endian)


@pytest.fixture
def emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start and restart the runner's Stripe provider; its port and a client of it."""
    port = free_port()
    monkeypatch.setattr(runner, "WITH_STRIPE", True)
    monkeypatch.setattr(runner, "PROVIDER_PORT", str(port))
    monkeypatch.setattr(runner, "VAR_DIR", tmp_path)
    child = runner._provider(str(Path(sys.executable).parent))
    processes: list[subprocess.Popen[bytes]] = []

    class Emulator:
        url = f"http://127.0.0.1:{port}"

        def start(self) -> None:
            process = subprocess.Popen(
                child.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            processes.append(process)
            deadline = time.monotonic() + STARTUP_S
            while not listening_addresses(port):
                assert process.poll() is None, f"exited with {process.returncode}"
                assert time.monotonic() < deadline, "did not listen"
                time.sleep(0.05)  # the server has no readiness signal but its socket

        def stop(self) -> None:
            process = processes[-1]
            process.send_signal(signal.SIGINT)  # Ctrl-C, as the runner's stop reaches it
            process.wait(timeout=10)

        def client(self) -> stripe.StripeClient:
            return stripe.StripeClient(
                runner.DEMO_STRIPE["STRIPE_API_KEY"],
                base_addresses={"api": self.url},
                max_network_retries=0,
            )

    try:
        yield Emulator()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_it_listens_on_loopback_only(emulator):
    emulator.start()

    assert listening_addresses(int(emulator.url.rsplit(":", 1)[1])) == {IPV4_LOOPBACK}


def test_what_it_holds_outlives_a_restart_as_the_demos_database_does(emulator):
    emulator.start()
    intent = emulator.client().v1.payment_intents.create(
        params={"amount": 12800, "currency": "cny", "metadata": {"out_trade_no": "P-restart"}}
    )
    emulator.stop()

    emulator.start()
    again = emulator.client().v1.payment_intents.retrieve(intent.id)

    assert again.metadata["out_trade_no"] == "P-restart"
    assert again.amount == 12800


def test_the_banner_gives_a_command_that_shows_what_it_holds(emulator):
    emulator.start()

    note = runner.provider_note()

    # Not its bare URL, which a browser would open to a 401: a command that works.
    command = re.search(r"curl [^\n]*", note)
    assert command is not None, note
    shown = subprocess.run(
        shlex.split(command.group(0)), capture_output=True, text=True, timeout=10, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert '"object": "list"' in shown.stdout or '"object":"list"' in shown.stdout
