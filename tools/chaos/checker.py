"""The history check: what every customer was told, held against the books.

Each rule below is the published contract (docs/design.md: the key, orders and
payments, the invariants) read as a property of one run. A violation names its
rule and carries the history events that show it, so it can be read without the
run at hand.

What a customer was told is an ``intent`` event: ``ok`` and ``fail`` are final
answers and must be true of the books afterwards; ``info`` (the client gave up
with nothing final) constrains nothing but "at most once".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from onceshop_client.retry import is_retryable
from tools.chaos.books import Books
from tools.chaos.history import Event

# The answers each operation may give (docs/design.md, "Behaviour matrix"): the
# status, and for a 4xx the problem codes it may carry. Of the 5xx only a 503 with
# Retry-After ("not settled yet, same key again, then") is an answer (below).
MATRIX: dict[str, dict[int, frozenset[str]]] = {
    "create": {
        201: frozenset(),
        409: frozenset(
            {"out-of-stock", "too-many-open-orders", "idempotency-key-in-use", "concurrent-update"}
        ),
        429: frozenset({"throttled", "idempotency-key-quota"}),
    },
    "pay": {
        200: frozenset(),
        202: frozenset(),  # payment-action-required: not final, the same key asks again
        402: frozenset({"payment-declined", "payment-failed"}),
        409: frozenset({"order-not-payable", "idempotency-key-in-use", "concurrent-update"}),
        429: frozenset({"throttled", "idempotency-key-quota"}),
    },
    "cancel": {
        200: frozenset(),
        409: frozenset({"order-not-cancellable", "idempotency-key-in-use", "concurrent-update"}),
        429: frozenset({"throttled", "idempotency-key-quota"}),
    },
    "refund": {
        200: frozenset(),
        402: frozenset({"refund-declined"}),
        409: frozenset(
            {
                "order-not-refundable",
                "refund-exceeds-paid",
                "idempotency-key-reused",
                "idempotency-key-in-use",
                "concurrent-update",
            }
        ),
        429: frozenset({"throttled", "idempotency-key-quota"}),
    },
}
# The one server error a customer may meet (docs/design.md, "Redis down"): 503 with
# a Retry-After, "not settled yet, come back with the same key". Any other answer of
# 500 and above (a 500, a 502, a 503 that does not say when) is a violation.
UNAVAILABLE = 503
# The pay answer that is not final (the provider waits for the customer): never the
# key's stored answer, so not held against the answers that are.
ACTION_REQUIRED = 202
CAPTURED = frozenset({"PAID", "REFUNDED"})
# HAProxy's own answer when the node serving a request dies under it (the cluster
# run's ``kill-node``): a 502 with HAProxy's page, not the shop's problem+json. The
# customer was cut off, exactly as by a reset connection, and sends the same key
# again. It counts as no answer only right after a node kill: any other 502 is one.
CUT_OFF = 502
NODE_KILL = "kill-node"
CUT_OFF_WINDOW_S = 5.0


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    evidence: list[Event] = field(default_factory=list)


def operation(method: str, path: str) -> str:
    """Which operation a request was: create, pay, cancel, refund or read."""
    if method != "POST":
        return "read"
    if path.rstrip("/") == "/api/v1/orders":
        return "create"
    for name, suffix in (("pay", "/pay/"), ("cancel", "/cancel/"), ("refund", "/refunds/")):
        if path.endswith(suffix):
            return name
    return "other"


def check(history: Iterable[Event], books: Books) -> list[Violation]:
    events = list(history)
    intents = [e for e in events if e["type"] == "intent"]
    requests = [e for e in events if e["type"] == "request"]
    node_kills = [e["t"] for e in events if e["type"] == "nemesis" and e["kind"] == NODE_KILL]
    return [
        *_audit(books),
        *_matrix(requests, node_kills),
        *_same_answer_per_key(requests),
        *_creates(intents, books),
        *_pays(intents, books),
        *_cancels_and_refunds(intents, books),
        *_wallets(books),
        *_stock(books),
        *_quiescent(books),
        *_desk(books),
    ]


def _audit(books: Books) -> list[Violation]:
    if books.audit_exit == 0:
        return []
    return [Violation("audit", f"manage.py audit exited {books.audit_exit}:\n{books.audit_output}")]


def _cut_off_by_a_node_kill(event: Event, node_kills: list[float]) -> bool:
    """The load balancer's 502 for a request whose node was killed just before."""
    if event.get("status") != CUT_OFF or event.get("code"):
        return False
    return any(0 <= event["t"] - killed <= CUT_OFF_WINDOW_S for killed in node_kills)


def _matrix(requests: list[Event], node_kills: list[float]) -> list[Violation]:
    """Every answer is in the published matrix; no server error but 503 with Retry-After."""
    found = []
    for event in requests:
        status = event.get("status")
        if status is None or _cut_off_by_a_node_kill(event, node_kills):
            continue  # no answer (the connection failed): the same key was sent again
        op = operation(event["method"], event["path"])
        if status >= 500:
            if status != UNAVAILABLE or not event.get("retry_after"):
                said = "" if status != UNAVAILABLE else " without Retry-After"
                found.append(Violation("no 5xx but 503", f"{op} answered {status}{said}", [event]))
            continue
        allowed = MATRIX.get(op)
        if allowed is None:
            if status != 200:
                found.append(Violation("matrix", f"read answered {status}", [event]))
            continue
        if status not in allowed:
            found.append(Violation("matrix", f"undocumented status {status}", [event]))
        elif status >= 400 and event.get("code") not in allowed[status]:
            found.append(
                Violation(
                    "matrix", f"{status} with undocumented code {event.get('code')!r}", [event]
                )
            )
    return found


def _same_answer_per_key(requests: list[Event]) -> list[Violation]:
    """Every final answer to one key is the same: a retry is a replay."""
    answers: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for event in requests:
        status = event.get("status")
        if not event.get("key") or status is None:
            continue
        if status == ACTION_REQUIRED or is_retryable(status=status, code=event.get("code") or ""):
            continue
        answers[(event["customer"], event["key"])].append(event)
    found = []
    for (customer, key), events in answers.items():
        told = {(e["status"], e.get("code") or "", e.get("number") or "") for e in events}
        if len(told) > 1:
            found.append(
                Violation("one answer per key", f"{customer}/{key} got {sorted(told)}", events)
            )
    return found


def _creates(intents: list[Event], books: Books) -> list[Violation]:
    found = []
    made: dict[tuple[str, str], list[str]] = defaultdict(list)
    for book in books.orders.values():
        if book.create_key:
            made[(book.user, book.create_key)].append(book.number)
    for (user, key), numbers in made.items():
        if len(numbers) > 1:
            found.append(Violation("one order per key", f"{user}/{key} made {sorted(numbers)}"))
    for event in intents:
        if event["op"] != "create" or event["outcome"] != "ok":
            continue
        order = books.orders.get(event["number"])
        if order is None or order.user != event["customer"] or order.create_key != event["key"]:
            found.append(Violation("told 201", f"order {event['number']} is not theirs", [event]))
        elif order.amount != event["amount"]:
            found.append(
                Violation("told 201", f"order {order.number} holds {order.amount}", [event])
            )
    return found


def _pays(intents: list[Event], books: Books) -> list[Violation]:
    found = []
    for event in intents:
        if event["op"] != "pay" or event["outcome"] == "info":
            continue
        order = books.orders.get(event["order"])
        key = books.keys.get((event["customer"], event["key"]))
        attempt = books.attempts.get(key.attempt) if key and key.attempt else None
        if event["outcome"] == "ok":
            if order is None or order.status not in CAPTURED:
                status = order.status if order else "missing"
                found.append(Violation("told PAID", f"order {event['order']} is {status}", [event]))
            elif order.captures != (order.amount,):
                found.append(
                    Violation(
                        "told PAID",
                        f"order {order.number} has captures {list(order.captures)}",
                        [event],
                    )
                )
        elif event["status"] == 402:
            if attempt is None:
                found.append(Violation("told 402", "no attempt behind the key", [event]))
            elif attempt.provider_net and not (
                # Documented: an asynchronous method declined now and captured later
                # is rolled forward when the order can still take it (docs/design.md,
                # "Orphaned captures").
                attempt.late_success
                and attempt.status == "SUCCEEDED"
                and order is not None
                and order.status in CAPTURED
            ):
                found.append(
                    Violation(
                        "told 402",
                        f"attempt {attempt.out_trade_no} was charged {attempt.provider_net}",
                        [event],
                    )
                )
    return found


def _cancels_and_refunds(intents: list[Event], books: Books) -> list[Violation]:
    found = []
    for event in intents:
        if event["outcome"] != "ok" or event["op"] not in ("cancel", "refund"):
            continue
        order = books.orders.get(event["order"])
        if order is None:
            found.append(Violation(f"told {event['op']}", "order missing", [event]))
        elif event["op"] == "cancel" and order.status != "CANCELLED":
            found.append(Violation("told cancelled", f"order is {order.status}", [event]))
        elif (
            event["op"] == "refund"
            # A refund reversed after the customer was told (the provider could not pay
            # it out) is booked back out of refunded_amount: documented, a case holds it.
            and order.refunded_amount + order.reversed < event["refunded_amount"]
        ):
            found.append(
                Violation(
                    "told refunded",
                    f"order refunded {order.refunded_amount} (reversed {order.reversed})",
                    [event],
                )
            )
    return found


def _wallets(books: Books) -> list[Violation]:
    found = []
    for payer in sorted(set(books.wallets) | set(books.ledger_net)):
        charged, refunded = books.wallets.get(payer, (0, 0))
        # Disputes gave money back to the payer too (dispute_lost), outside any refund.
        net = charged - refunded - books.disputed.get(payer, 0)
        if net != books.ledger_net.get(payer, 0):
            found.append(
                Violation(
                    "wallet = books",
                    f"{payer}: provider net debit {net}, books {books.ledger_net.get(payer, 0)}",
                )
            )
    return found


def _stock(books: Books) -> list[Violation]:
    sold: dict[str, int] = defaultdict(int)
    for order in books.orders.values():
        if order.status != "CANCELLED":
            for sku, quantity in order.lines:
                sold[sku] += quantity
    found = []
    for sku, (stock, received) in sorted(books.products.items()):
        if stock != received - sold[sku] or stock < 0:
            found.append(
                Violation(
                    "stock", f"{sku}: stock {stock}, received {received}, live orders {sold[sku]}"
                )
            )
    return found


def _quiescent(books: Books) -> list[Violation]:
    found = [Violation("quiescent", item) for item in books.unresolved]
    for order in books.orders.values():
        expected = {1} if order.status == "PAID" else {0, 1} if order.status == "REFUNDED" else {0}
        if order.shipments not in expected:
            found.append(
                Violation("shipped once", f"{order.status} order {order.number}: {order.shipments}")
            )
    return found


def _desk(books: Books) -> list[Violation]:
    """Every case the run opened is closed: by the machine (its subject settled) or by
    a person's action that is on the record (docs/operating.md, "The operator's desk")."""
    found = []
    for case in books.cases:
        if case.state == "open":
            found.append(Violation("case closed", f"case {case.id} ({case.kind}) is still open"))
        elif case.resolved_by and case.resolved_by not in case.acted_by:
            found.append(
                Violation(
                    "case closed by a recorded action",
                    f"case {case.id} was closed by {case.resolved_by}, who has no recorded action "
                    f"on it ({case.resolution})",
                )
            )
    return found
