"""HAProxy in front of the web nodes: round robin, health-checked, never a resent POST.

A node that misses ``/healthz`` three times (2 s apart, 3 s to answer) leaves
the rotation and rejoins after two good answers. HAProxy retries only a connection that
failed (its default ``retry-on conn-failure``): a request a node already
received is never sent to a second node, so a node killed mid-pay leaves the
client an error to retry with the same Idempotency-Key, never a silent double.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

HAPROXY = "/usr/sbin/haproxy"


@dataclass
class HAProxy:
    work_dir: Path
    port: int
    backends: list[tuple[str, int]]  # (name, port) of each web node
    process: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.work_dir / "haproxy.sock"

    def write_config(self) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        servers = "\n".join(
            f"    server {name} 127.0.0.1:{port} check" for name, port in self.backends
        )
        config = f"""global
    maxconn 4096
    # The runtime API: a measurement (tools/cluster/load.py) takes nodes out and back.
    stats socket {self.socket} mode 600 level admin

defaults
    mode http
    option httplog
    # Connecting to a node is local; answering may take a provider call (5 s) and
    # a lock wait (5 s): 65 s is above gunicorn's own 60 s worker timeout.
    timeout connect 2s
    timeout client 65s
    timeout server 65s
    # The shop sees who asked (TRUSTED_PROXY_COUNT=1 reads it back).
    option forwardfor
    # Only a refused connection is retried, on another node (redispatch).
    retries 2
    option redispatch

frontend shop
    bind 127.0.0.1:{self.port}
    default_backend nodes

backend nodes
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    # A saturated node answers its check late, not never: 3 s to answer, three
    # misses in a row (2 s apart) before it leaves, so load alone does not flap it.
    # A node that refuses or cuts a real request is out at once (observe layer4),
    # without waiting for its checks: a killed node costs one error, not three checks.
    timeout check 3s
    default-server inter 2s fall 3 rise 2 observe layer4 error-limit 1 on-error mark-down
{servers}
"""
        path = self.work_dir / "haproxy.cfg"
        path.write_text(config)
        return path

    def start(self) -> None:
        config = self.write_config()
        # -db: stay in the foreground, a child of ours that Ctrl-C stops.
        self.process = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(config)],
            start_new_session=True,
            stdout=(self.work_dir / "haproxy.log").open("ab"),
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=10)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None
