from django.apps import AppConfig


class ReconcileConfig(AppConfig):
    """Background work that leaves nothing uncertain (its audit: operations/audit/)."""

    name = "reconcile"
    verbose_name = "Reconciliation"

    def ready(self) -> None:
        from idempotency.services import reap_isolation_register
        from observability.metrics.gauges import count_and_age_gauges, register
        from reconcile import selectors
        from reconcile.desk import selectors as desk
        from reconcile.desk.isolation import REAP, FailureIsolation

        # The reaper's records go through the desk's failure isolation, whoever runs the reaper.
        reap_isolation_register(lambda: FailureIsolation(job=REAP, subject_type="record"))

        # Stray captures not refunded yet (docs/operating.md).
        register(
            *count_and_age_gauges(
                "onceshop_stray_captures_unrefunded",
                "capture a statement listed for no attempt of ours, not refunded yet",
                selectors.stray_captures_unrefunded,
            ),
            # The desk: what waits for a person, and how long the oldest has waited.
            *count_and_age_gauges(
                "onceshop_cases_open",
                "case on the operator's desk, open (waiting for a person)",
                desk.cases_open_count_and_age,
            ),
        )
