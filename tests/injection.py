"""Fault injection at the database driver: fail a chosen statement, for crash tests."""

from collections.abc import Callable
from typing import Any


def crash_on(prefix: str) -> Callable[..., Any]:
    """An execute wrapper that fails the first statement starting with ``prefix``."""
    fired: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(prefix) and not fired:
            fired.append(sql)
            raise ConnectionResetError(f"injected before: {prefix}")
        return execute(sql, params, many, context)

    return wrapper
