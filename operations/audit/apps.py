from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit that proves the books balance: ``manage.py audit`` and beat's ``audit_books``."""

    name = "operations.audit"
    label = "audit"
    verbose_name = "Audit"
