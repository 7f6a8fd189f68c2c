"""One story at a time, whoever starts it, and how long one takes.

A second click, two browsers, the button beside ``make story``: each story
scripts the provider's next charges, so two side by side would trip over each
other's faults. The single-runner lock (``reconcile/locks.py``: Redis ``SET NX
PX``, released by compare-and-delete) decides, across the web server's
processes; a story that does not get it raises ``StoryRunning`` before it has
done anything. Without Redis the lock is skipped, as for every job that takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from django.utils.translation import gettext, gettext_noop

from demo.shop.story.report import StoryRunning
from reconcile.locks import single_runner

# What the pages and the command tell a reader to expect: a story takes 12-13 s
# against `make demo` on a 2-core machine (its own waits are most of it: the
# provider answering late, the gateway's 3 s, the late capture's 2 s).
ABOUT_S = 15
STORY_LOCK = "story"
# Longer than any story runs (a few waits, each capped by wait_s: 30 s at most by
# default), short enough that a story whose process died frees the next one within
# minutes.
STORY_LOCK_TTL_S = 180.0
ALREADY_RUNNING = gettext_noop(
    "A story is already running (started by the home page's button or by make story): one "
    "runs at a time, because each scripts the provider's next charges. It shows its result "
    "where it was started; run it again once it has ended."
)

Params = ParamSpec("Params")
Result = TypeVar("Result")


def one_at_a_time(run: Callable[Params, Result]) -> Callable[Params, Result]:
    """``run`` under the story's lock; StoryRunning, having done nothing, while it is held."""

    @wraps(run)
    def alone(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        with single_runner(name=STORY_LOCK, ttl_s=STORY_LOCK_TTL_S) as mine:
            if not mine:
                raise StoryRunning(gettext(ALREADY_RUNNING))
            return run(*args, **kwargs)

    return alone
