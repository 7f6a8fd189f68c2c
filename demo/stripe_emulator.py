"""localstripe as the Stripe demo's provider: on loopback, its objects kept with the demo's.

``python -m localstripe`` listens on every interface, and keeps its objects in
``/tmp/localstripe.pickle``, one file for every emulator on the machine (with
``--from-scratch`` it forgets them at each start, while the demo's database
remembers the payments it made there: the books of the next run disagree).
Here the same server listens on 127.0.0.1 only, like the rest of the demo, and
keeps its objects in a file of the Stripe demo's state directory, so they
last as long as the orders that name them and go with them (`make clean`).

    python -m demo.stripe_emulator --port 8001 --state .var/stripe/localstripe.pickle
"""

from __future__ import annotations

import argparse
import logging
import pickle
import sys
from pathlib import Path

from aiohttp import web
from localstripe import resources
from localstripe.server import app


def keep_objects_in(path: Path) -> None:
    """Load localstripe's objects from ``path`` and write them back there on every change.

    localstripe names its file in two methods of its one store; the store asks
    itself for them on every write, so the ones set on it here are used instead.
    """
    store = resources.store

    def load() -> None:
        try:
            saved = pickle.loads(path.read_bytes())  # noqa: S301  # the file this process wrote
        except FileNotFoundError:
            return
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as error:
            # Half a file (a kill mid-write under an older layout): start empty, say so.
            print(f"[localstripe] {path} unreadable ({error}); starting empty", file=sys.stderr)
            return
        dict.clear(store)
        dict.update(store, saved)

    def dump() -> None:
        # Written aside and renamed: a kill mid-write never leaves half a file.
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.write_bytes(pickle.dumps(dict(store), protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(path)

    store.try_load_from_disk = load
    store.dump_to_disk = dump
    load()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.stripe_emulator")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True, help="where its objects are kept")
    args = parser.parse_args(argv)
    keep_objects_in(args.state)
    # One line per request on stderr, as localstripe's own entry point prints them.
    access = logging.getLogger("aiohttp.access")
    access.setLevel(logging.INFO)
    access.addHandler(logging.StreamHandler())
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=access, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
