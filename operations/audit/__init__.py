"""The audit: read-only checks of the invariants over the books (``run.audit_run``).

``checks/`` holds one module per area, ``findings`` the report's shape; the
``audit`` command and the ``audit_books`` task print or count what it finds.
"""
