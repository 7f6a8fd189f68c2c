"""A loopback TCP proxy that loses answers: the network failure no status code shows.

The first ``drops`` connections forward the client's request to the server,
wait until the server starts answering (so the request really ran), then reset
the client's connection: the client sent a request, the server did the work,
and the client never hears about it. Later connections pass through.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType
from urllib.parse import urlsplit

CHUNK = 65536


class DroppingProxy:
    def __init__(self, upstream_url: str, *, drops: int = 1) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.drops_left = drops
        self.connections = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> DroppingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by __exit__
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self.connections += 1
                drop = self.drops_left > 0
                self.drops_left -= int(drop)
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(
                target=self._answer, args=(upstream, client, drop), daemon=True
            ).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                target.sendall(data)
        except OSError:
            pass  # either side closed: the other pump ends too
        finally:
            target.close()

    def _answer(self, upstream: socket.socket, client: socket.socket, drop: bool) -> None:
        if not drop:
            self._pump(upstream, client)
            return
        with contextlib.suppress(OSError):
            upstream.recv(CHUNK)  # the server has run the request and started answering
        with self._lock:
            self.dropped += 1
        # SO_LINGER 0: close sends a RST, the client sees "connection reset". The
        # shutdown first wakes the pump blocked reading this socket (a plain close
        # would wait for that read to return, and the client would see nothing).
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.shutdown(socket.SHUT_RDWR)
        client.close()
        upstream.close()
