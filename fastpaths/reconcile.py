"""Agrees with ``reconcile.recovery.unsettled_payments.reconcile_due``: the same pass, in batches.

The core's pass asks the provider about one attempt, settles it, and moves on:
one provider round trip and about sixteen statements per attempt, in one thread.
A provider outage leaves thousands of attempts unknown, and that pass then spends
minutes where the provider could answer in seconds. This pass settles the same
attempts with the same rows, three ways faster:

- a batch's questions go out at once, RECONCILE_CONCURRENCY at a time, in threads
  that touch no database (``payment_ask``), on kept-alive connections;
- the plain answers (the attempt's own success on an UNPAID order, a decline, a
  fence) are settled together (``fastpaths/settlement.py``) and the requests
  behind them finished together (``fastpaths/completion.py``): a fixed number of
  statements per batch, whatever its size;
- the next batch is claimed and asked before this one's answers are read, so the
  provider stays busy while the database work runs; a claim is one statement
  (``claim_due_at_once``), where the core's ``claim_due`` takes a transaction of
  three.

Every other answer (unreachable, a customer to wait for, a conflict, an orphaned
capture, an attempt settled meanwhile) goes to ``payment_reconcile`` with its
answer (``AskedAhead``), exactly as in the core's pass. It plugs in at one seam,
the setting ``RECONCILE_PAYMENT_PASS`` (docs/configuration.md);
``tests/fastpaths/test_reconcile.py`` runs both passes on the same cases and
compares the rows and the stored answers.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from fastpaths.completion import complete_pay_requests
from fastpaths.settlement import BatchNotApplied, payment_settle_many
from observability import context
from payments.models import UNSETTLED_STATUSES, Payment, PaymentStatus
from payments.providers import ChargeResult, PaymentProvider
from reconcile.desk.isolation import PAYMENTS, FailureIsolation
from reconcile.recovery import unsettled_payments
from reconcile.recovery.claims import hand_back
from reconcile.recovery.unsettled_payments import (
    BATCH_SIZE,
    SETTLED,
    Answer,
    AskedAhead,
    ReconcileCounts,
    Resolution,
    payment_ask,
    payment_reconcile_isolated,
)

logger = logging.getLogger(__name__)
# An attempt's line is the core pass's line, under its logger: an operator follows one
# name, whichever pass runs.
attempt_logger = logging.getLogger(unsettled_payments.__name__)


# The core's claim (``reconcile.recovery.claims.claim_due``) as one statement: the
# due rows locked (SKIP LOCKED), leased and returned. In autocommit mode it is its
# own short transaction, so the row locks end with it, before any provider call.
_CLAIM = f"""
    UPDATE "{Payment._meta.db_table}" SET next_reconcile_at = %s
    WHERE id IN (
        SELECT id FROM "{Payment._meta.db_table}"
        WHERE status = ANY(%s) AND updated_at <= %s
          AND (next_reconcile_at IS NULL OR next_reconcile_at <= %s)
        ORDER BY updated_at
        LIMIT %s
        FOR UPDATE SKIP LOCKED)
    RETURNING *
"""  # noqa: S608 - the table name is the model's, every value is a parameter


def claim_due_at_once(*, now: datetime, limit: int) -> list[Payment]:
    """Agrees with ``claim_due(Payment, statuses=UNSETTLED_STATUSES, ...)``: the same
    rows, the same lease, in one statement."""
    lease_until = now + timedelta(seconds=settings.RECONCILE_LEASE_S)
    due_before = now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    params = [lease_until, [str(s) for s in UNSETTLED_STATUSES], due_before, now, limit]
    return list(Payment.objects.raw(_CLAIM, params))


# The pass budget's clock (a module attribute, so a test can make time run out).
_monotonic = time.monotonic


def reconcile_due_batched(
    *,
    provider: PaymentProvider,
    batch_size: int = BATCH_SIZE,
    budget_s: float | None = None,
    concurrency: int | None = None,
) -> ReconcileCounts:
    """``reconcile_due``, a batch at a time: asked at once, settled and finished together.

    The batches whose questions are out, oldest first: the one being read, and the
    next one, claimed and asked before this one's answers are read. Its rows are
    leased already, so nobody else asks about them; a question whose row is then
    handed back is asked again next time (reads and fences are safe to repeat).
    """
    deadline = _monotonic() + (settings.RECONCILE_PASS_BUDGET_S if budget_s is None else budget_s)
    workers = settings.RECONCILE_CONCURRENCY if concurrency is None else concurrency
    counts: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:

        def claim_and_ask() -> tuple[list[Payment], Iterator[Answer]]:
            batch = claim_due_at_once(now=timezone.now(), limit=batch_size)
            counts["claimed"] += len(batch)
            # Every question goes out now; the answers are read lazily, in batch
            # order, as they come in.
            return batch, pool.map(partial(_ask, provider=provider), batch)

        out = deque([claim_and_ask()]) if _monotonic() < deadline else deque()
        while out and out[0][0]:
            batch, answers = out.popleft()
            if (ahead := claim_and_ask())[0]:
                out.append(ahead)
            collected: list[tuple[Payment, Answer]] = []
            for index, (payment, answer) in enumerate(zip(batch, answers, strict=True)):
                if _monotonic() >= deadline:
                    for rows in (batch[index:], *(rows for rows, _ in out)):
                        counts["handed_back"] += hand_back(Payment, rows=rows)
                    out.clear()
                    break
                collected.append((payment, answer))
            resolutions = payment_answers_apply(collected, provider=provider) if collected else []
            counts.update(resolution.value for resolution in resolutions)
            settled = [
                payment.pk
                for (payment, _), resolution in zip(collected, resolutions, strict=True)
                if resolution.value in SETTLED
            ]
            counts["completed"] += complete_pay_requests(payment_ids=settled, provider=provider)
    return ReconcileCounts(**counts)


def _ask(payment: Payment, *, provider: PaymentProvider) -> Answer:
    # In a worker thread: an error is handed back as the answer, and raised again
    # where ``payment_reconcile`` would have met it (``AskedAhead``).
    try:
        return payment_ask(payment, provider)
    except Exception as error:
        return error


def payment_answers_apply(
    answers: list[tuple[Payment, Answer]], *, provider: PaymentProvider
) -> list[Resolution]:
    """Settle a batch's answers: the plain ones together, every other one on its own.

    The plain answers (the attempt's own success on an UNPAID order, a decline, a
    fence) are applied in one transaction of a few statements
    (``payment_settle_many``); whatever it leaves (unreachable, a customer to wait
    for, conflicts, orphaned captures, attempts settled meanwhile) goes to
    ``payment_reconcile`` one by one, with its answer. If the batch fails as a
    whole, every answer goes that way, where a failure is one attempt's.
    """
    plain = [(payment, answer) for payment, answer in answers if isinstance(answer, ChargeResult)]
    try:
        settled = payment_settle_many(answers=plain)
    except (DatabaseError, BatchNotApplied):
        logger.exception("batch of %d answers not settled together; one by one", len(plain))
        settled = {}
    resolutions = []
    isolation = FailureIsolation(job=PAYMENTS, subject_type="payment")
    for payment, answer in answers:
        if payment.pk not in settled:
            asked = AskedAhead(provider, answer)
            resolutions.append(
                payment_reconcile_isolated(payment=payment, provider=asked, isolation=isolation)
            )
            continue
        resolution = (
            Resolution.ROLLED_FORWARD
            if settled[payment.pk].status == PaymentStatus.SUCCEEDED
            else Resolution.ROLLED_BACK
        )
        with context.bound(out_trade_no=payment.out_trade_no):
            attempt_logger.info("payment %s reconciled: %s", payment.pk, resolution.value)
        if payment.reconcile_attempts:
            # Backed off before (unreachable, or failed): a failure count to clear, if
            # any. The common first-try attempt costs no read of the counts.
            isolation.settled(key=payment.pk, reference=payment.out_trade_no)
        resolutions.append(resolution)
    return resolutions
