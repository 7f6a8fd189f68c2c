"""The run's history: what happened, in order, one JSON object a line.

Four kinds of event, told apart by ``type``:

- ``request``: one HTTP exchange a customer had with a shop server: method,
  path, ``key``, which server, and the answer (``status``, the problem's
  ``code``, ``replayed``) or the ``error`` that stood for it (a refused or cut
  connection, a timeout);
- ``intent``: one call of the client (create, pay, cancel, refund) and what the
  customer was finally told: ``ok`` (a 2xx), ``fail`` (a final 4xx) or
  ``info`` (the client gave up without a final answer: anything may have happened);
- ``nemesis``: one fault the nemesis injected, with what it hit;
- ``phase``: the run's own milestones (start, quiesce, ...).

Every event carries ``t``, seconds since the run started. The checker reads
``request`` and ``intent`` events only.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class History:
    """An append-only JSON-lines file, safe to write from many threads.

    Each line is flushed as it is written: a run that is itself killed still
    leaves every event it recorded so far.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def record(self, type: str, **fields: Any) -> None:
        event = {"t": round(time.monotonic() - self._started, 4), "type": type, **fields}
        line = json.dumps(event, sort_keys=True, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def history_read(path: Path) -> list[Event]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
