"""The experiments, by number. Each module has ``MISTAKE`` and ``run(lab) -> Finding``."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from tools.lab.context import Lab
from tools.lab.experiments import (
    e01_button,
    e02_timestamp_keys,
    e03_unscoped_keys,
    e04_never_expired,
    e05_get_then_del,
    e06_split_transaction,
    e07_key_discipline,
    e08_retry_storm,
    e09_check_then_act,
    e10_lock_for_idempotency,
)
from tools.lab.report import Finding

MODULES: dict[int, ModuleType] = {
    1: e01_button,
    2: e02_timestamp_keys,
    3: e03_unscoped_keys,
    4: e04_never_expired,
    5: e05_get_then_del,
    6: e06_split_transaction,
    7: e07_key_discipline,
    8: e08_retry_storm,
    9: e09_check_then_act,
    10: e10_lock_for_idempotency,
}


def runner(number: int) -> Callable[[Lab], Finding]:
    run: Callable[[Lab], Finding] = MODULES[number].run
    return run
