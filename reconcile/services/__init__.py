"""The reconciler's writes, one module per periodic job (each with its ``run_once()``):

- ``payments``: resolve unknown payment attempts against the provider;
- ``completion``: finish requests their clients abandoned;
- ``expiry``: cancel unpaid orders past ORDER_TTL_S, stock back once;
- ``fulfilment``: ship PAID orders a lost message left unshipped;
- ``passes``: run them in order, each under its single-runner lock.

(The reaper is ``idempotency.services.idempotency_key_reap``: it belongs to the
idempotency layer, the pass only schedules it.)
"""
