from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    name = "payments"

    def ready(self) -> None:
        from observability.metrics.gauges import count_and_age_gauges, register
        from payments import selectors

        # The money gauges the alerts watch (docs/operating.md), two per read: how
        # many, and how old the oldest is (0 when there is none).
        register(
            *count_and_age_gauges(
                "onceshop_payments_unresolved",
                "payment attempt PENDING or UNKNOWN (the provider's answer is not in)",
                selectors.payments_unresolved,
            ),
            *count_and_age_gauges(
                "onceshop_refunds_unresolved",
                "refund attempt PENDING or UNKNOWN (orphan refunds included)",
                selectors.refunds_unresolved,
            ),
            *count_and_age_gauges(
                "onceshop_orphaned_captures_unrefunded",
                "orphaned capture whose refund has not succeeded yet",
                selectors.orphaned_captures_unrefunded,
            ),
        )
