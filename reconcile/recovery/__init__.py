"""Recovery: what an unknown outcome or a lost message left open, one module per
periodic job (each with its ``run_once()``):

- ``payments``: resolve unknown payment attempts against the provider (and
  account for captures the shop could not apply: roll forward or orphan);
- ``notifications``: settle what deferred or rejected notifications raised;
- ``refunds``: resolve unknown refund attempts, drive orphan refunds to the end;
- ``completion``: finish requests their clients abandoned;
- ``expiry``: cancel unpaid orders past ORDER_TTL_S, stock back once;
- ``fulfilment``: ship PAID orders a lost message left unshipped;
- ``strays``: captures of references we hold no attempt for, confirmed and refunded.

``reconcile.passes`` runs them (and the statement's leftovers) in order, each
under its single-runner lock.

``claims`` is the lease/backoff machinery ``payments`` and ``refunds`` share.
(The reaper is ``idempotency.services.idempotency_key_reap``: it belongs to the
idempotency layer, the pass only schedules it.)
"""
