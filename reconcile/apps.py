from django.apps import AppConfig


class ReconcileConfig(AppConfig):
    """Background work that leaves nothing uncertain, and the audit that proves it."""

    name = "reconcile"
    verbose_name = "Reconciliation"
