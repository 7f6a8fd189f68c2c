"""Every call to the payment provider, counted, timed and logged (docs/operating.md)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar, cast

from observability.metrics import instruments
from payments.providers.base import ProviderOutcomeUnknown, ProviderRejected

logger = logging.getLogger("onceshop.provider")

P = ParamSpec("P")
R = TypeVar("R")


def provider_call(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Count and time a provider operation; log it (with the request's context).

    Outcomes: ``ok``, ``rejected`` (a 4xx refusal), ``unknown`` (timeout, 5xx,
    an answer about another reference), ``error`` (anything else raised). A
    streamed operation (a generator: the daily statement) is one call from its
    first request to its last line, or to the error that ended it.
    """

    def decorate(call: Callable[P, R]) -> Callable[P, R]:
        if inspect.isgeneratorfunction(call):

            @functools.wraps(call)
            def observed_stream(*args: P.args, **kwargs: P.kwargs) -> Any:
                with _observed(operation):
                    yield from call(*args, **kwargs)

            return cast(Callable[P, R], observed_stream)

        @functools.wraps(call)
        def observed(*args: P.args, **kwargs: P.kwargs) -> R:
            with _observed(operation):
                return call(*args, **kwargs)

        return observed

    return decorate


@contextlib.contextmanager
def _observed(operation: str) -> Iterator[None]:
    started = time.perf_counter()
    outcome, detail = "error", ""
    try:
        yield
        outcome = "ok"
    except ProviderOutcomeUnknown as error:
        outcome, detail = "unknown", f": {error}"
        raise
    except ProviderRejected as error:  # a 4xx with the provider's code: nothing moved
        outcome, detail = "rejected", f": {error}"
        raise
    finally:
        elapsed = time.perf_counter() - started
        instruments.PROVIDER_CALLS.labels(operation=operation, outcome=outcome).inc()
        instruments.PROVIDER_LATENCY.labels(operation=operation).observe(elapsed)
        level = logging.INFO if outcome == "ok" else logging.WARNING
        logger.log(level, "provider %s %s%s in %.1f ms", operation, outcome, detail, elapsed * 1000)
