"""Operations: what runs the pattern in production, each in a room of its own.

The core (``idempotency``, ``orders``, ``payments``, ``callbacks``, ``reconcile``)
keeps every promise of the pattern on its own; a production team adds what sits
beside it: ``audit`` cross-checks the books, ``statements`` reads the provider's
daily statement against the ledger. Each room is a Django app that imports the
core. The core imports this package at one named hand-off only (the desk reads
the statement's models; tests/test_layers.py names it and refuses any other),
so a reader of the core may skip it (docs/design.md, "Layout").
"""
