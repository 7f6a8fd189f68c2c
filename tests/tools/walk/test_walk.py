"""make walk's own judgement: what counts as a clean Ctrl-C, and what is left running."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools.walk.__main__ import (
    DEFAULT_PORT,
    ROOT,
    cluster_ports,
    ctrl_c_ended_well,
    demo_ports,
    ports_in_use,
)


@pytest.mark.parametrize(
    ("on_ctrl_c", "clean"),
    [("pass", True), ("raise", True), ("raise SystemExit(1)", False)],
    ids=["recipe-exits-0", "recipe-ends-by-sigint", "recipe-fails"],
)
def test_make_stopped_by_ctrl_c_is_clean_when_its_recipe_stopped_cleanly(
    tmp_path, on_ctrl_c, clean
):
    # Real make, as a terminal's Ctrl-C reaches it: SIGINT to its whole process group.
    (tmp_path / "serve.py").write_text(
        "import pathlib, time\ntry:\n    pathlib.Path('started').touch()\n    time.sleep(30)\n"
        f"except KeyboardInterrupt:\n    {on_ctrl_c}\n"
    )
    (tmp_path / "Makefile").write_text(f"serve:\n\t{sys.executable} serve.py\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    make = subprocess.Popen(
        ["make", "--no-print-directory", "serve"],  # noqa: S607
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not (tmp_path / "started").exists():  # the recipe's python is in its try
        assert time.monotonic() < deadline, "the recipe did not start"
        time.sleep(0.02)
    os.killpg(make.pid, signal.SIGINT)
    printed, _ = make.communicate(timeout=20)

    last_line = printed.rstrip().rsplit("\n", 1)[-1]
    assert ctrl_c_ended_well(make.returncode, last_line) is clean, (make.returncode, printed)


def test_a_recipe_that_failed_or_a_kill_is_not_a_clean_ctrl_c():
    assert ctrl_c_ended_well(0, "")
    assert ctrl_c_ended_well(-signal.SIGINT, "make: *** [Makefile:42: demo] Interrupt")
    assert not ctrl_c_ended_well(-signal.SIGINT, "make: *** [Makefile:42: demo] Error 1")
    assert not ctrl_c_ended_well(2, "make: *** [Makefile:42: demo] Error 1")
    assert not ctrl_c_ended_well(-signal.SIGKILL, "")


def test_leftovers_names_a_process_on_a_walk_port_but_not_the_walk_or_what_started_it(tmp_path):
    port = 47999
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(port)])
    # The walk runs under a parent whose command line names the port, as
    # `make walk WALK_ARGS="--port 47999"` does.
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from tools.walk.__main__ import Walk, leftovers
        walk = Walk(var=Path({str(tmp_path)!r}), logs=Path({str(tmp_path)!r}), port={port})
        walk.ports.add({port})
        print("\\n".join(leftovers(walk)))
        """
    )
    try:
        found = subprocess.run(
            ["sh", "-c", f'"$0" -c "$1"; : --port {port}', sys.executable, script],  # noqa: S607
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split("\n")
    finally:
        stray.kill()
        stray.wait()

    assert [line for line in found if line.startswith(f"{stray.pid} ")], found
    assert not [line for line in found if "--port" in line], found


def test_a_port_held_by_another_processs_outgoing_connection_counts_as_in_use():
    # The local end of a connection, as an ephemeral port: a demo's worker could not
    # bind it, so the walk refuses to begin on it.
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        socket.create_connection(server.getsockname()) as client,
    ):
        local_port = client.getsockname()[1]
        free = _free_port()

        assert ports_in_use({local_port, free}) == [local_port]


def test_the_default_port_block_is_below_the_ephemeral_range():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    planned = demo_ports(DEFAULT_PORT)
    planned |= cluster_ports(DEFAULT_PORT + 100) | cluster_ports(DEFAULT_PORT + 200)

    assert max(planned) < low


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
