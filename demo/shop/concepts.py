"""Where each idea of the pattern lives in the code: the "Where it lives" table.

One source for the README's table and /how-it-works/: a test checks that every
symbol imports, every constraint name exists on a model, and that the README
carries exactly this table (``concepts_markdown``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_noop as _

from operations.audit.run import audit_checks as run_checks
from payments.providers import get_provider


@dataclass(frozen=True)
class Concept:
    idea: str  # English, marked: the page shows it translated, the README as is
    symbols: tuple[str, ...]  # dotted paths: module.function or module.Class
    constraints: tuple[str, ...] = ()  # database constraint names that enforce it
    doc: str = ""  # where it is explained at length

    @property
    def files(self) -> list[str]:
        modules = dict.fromkeys(symbol.rsplit(".", 1)[0] for symbol in self.symbols)
        return [module.replace(".", "/") + ".py" for module in modules]

    @property
    def names(self) -> list[str]:
        return [symbol.rsplit(".", 1)[1] for symbol in self.symbols]


CONCEPTS = (
    Concept(
        _("Idempotency-Key record per (user, key), written with the business rows"),
        ("idempotency.core.execute", "idempotency.phases.atomic_phase"),
        ("idempotency_key_unique_per_user", "idempotency_finished_has_response"),
        "docs/idempotency.md",
    ),
    Concept(
        _("The header, replays and `Idempotent-Replayed` in DRF"),
        ("idempotency.drf.IdempotentApi", "idempotency.drf.parse_idempotency_key"),
        (),
        "docs/idempotency.md",
    ),
    Concept(
        _("Recovery points of the pay flow (`payment_created`)"),
        ("payments.flows.order_pay_flow",),
        (),
        "docs/idempotency.md",
    ),
    Concept(
        _("Redis checkout token (`SET NX EX`, consumed by `GETDEL`)"),
        ("demo.shop.services.checkout_token_issue", "demo.shop.services.checkout_token_consume"),
        (),
        "docs/checkout-token.md",
    ),
    Concept(
        _("Order state machine: `UPDATE … WHERE status = 'UNPAID'`"),
        # Declared on the model; the UNPAID -> PAID UPDATE is written out in the
        # settlement (``_settle``, run by ``payment_settle``).
        ("orders.models.Order", "payments.services.payment_settle"),
        (),
        "docs/idempotency.md",
    ),
    Concept(
        _("One order per (user, key), even after the key's record is reaped"),
        ("orders.services.order_create",),
        ("order_one_per_user_key",),
    ),
    Concept(
        _("One live payment attempt per order; settled once"),
        ("payments.services.payment_create", "payments.services.payment_settle"),
        ("payment_one_live_attempt_per_order",),
    ),
    Concept(
        _(
            "Ledger: one capture per order, attempt and `trade_no`; one refund entry per "
            "refund attempt and per `refund_id`"
        ),
        ("payments.models.LedgerEntry",),
        (
            "ledger_one_capture_per_order",
            "ledger_one_capture_per_payment",
            "ledger_one_capture_per_trade_no",
            "ledger_one_refund_per_refund_attempt",
            "ledger_one_refund_per_refund_id",
            "ledger_fields_match_kind",
        ),
    ),
    Concept(
        _("Refunds: the pay flow the other way (`refund_created`), never above the capture"),
        ("payments.refund_flows.order_refund_flow", "payments.refunds.refund_create"),
        ("refund_one_live_per_order", "order_refunds_never_exceed_amount"),
        "docs/idempotency.md",
    ),
    Concept(
        _("Orphaned captures: rolled forward, or booked and refunded automatically"),
        ("payments.orphans.capture_orphan_resolve", "payments.orphans.orphan_refund_start"),
        ("refund_one_unsettled_per_orphaned_capture", "refund_one_succeeded_per_orphaned_capture"),
        "docs/reconciliation.md",
    ),
    Concept(
        _("One notification per `notify_id`; a duplicate gets the same answer"),
        ("callbacks.services.callback_ingest",),
        ("notification_unique_per_provider",),
    ),
    Concept(
        _("Stock never below zero; one reserve and one release per order line"),
        ("orders.services.order_create", "orders.services.order_cancel"),
        (
            "product_stock_non_negative",
            "inventory_one_reserve_per_order_product",
            "inventory_one_release_per_order_product",
        ),
    ),
    Concept(_("One shipment per order"), ("orders.services.shipment_create",)),
    Concept(
        _("Reconciliation: ask the provider, never guess; fence with `close`"),
        (
            "reconcile.recovery.unsettled_payments.payment_reconcile",
            "reconcile.recovery.unsettled_payments.reconcile_due",
            "reconcile.recovery.unsettled_payments.run_once",
            "reconcile.recovery.unsettled_payments.payment_ask",
        ),
        (),
        "docs/reconciliation.md",
    ),
    Concept(
        _("Single-runner lock (`SET NX PX`, Lua compare-and-delete)"),
        ("reconcile.locks.single_runner",),
        (),
        "docs/reconciliation.md",
    ),
    Concept(
        _("Finishing abandoned requests (the completer)"),
        ("reconcile.recovery.completion.record_complete",),
        (),
        "docs/reconciliation.md",
    ),
    Concept(
        _("The audit and its checks"),
        ("operations.audit.run.audit_run", "operations.audit.run.CHECKS"),
        (),
        "docs/audit.md",
    ),
)


def audit_checks() -> list[tuple[str, str]]:
    """Each check the audit runs here and the function that runs it: the list a run
    uses, the deployment's plug-ins for the configured provider included."""
    return [
        (title, f"{check.__module__}.{check.__name__}")
        for title, check in run_checks(get_provider())
    ]


def concepts_markdown() -> str:
    """The README's "Where it lives" table (kept equal to this by a test)."""
    rows = [
        "| concept | file | function or class | constraints | explained in |",
        "|---|---|---|---|---|",
    ]
    for concept in CONCEPTS:
        cells = [
            concept.idea,
            ", ".join(f"`{path}`" for path in concept.files),
            ", ".join(f"`{name}`" for name in concept.names),
            ", ".join(f"`{name}`" for name in concept.constraints) or "—",
            f"[{concept.doc}]({concept.doc})" if concept.doc else "—",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
