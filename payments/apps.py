from django.apps import AppConfig


class PaymentsConfig(AppConfig):
    name = "payments"

    def ready(self) -> None:
        from observability.metrics.gauges import GaugeSpec, register
        from payments import selectors

        # The money gauges the alerts watch (docs/operating.md), one line each.
        register(
            GaugeSpec(
                "onceshop_payments_unresolved",
                "Payment attempts PENDING or UNKNOWN (the provider's answer is not in yet)",
                selectors.payments_unresolved,
            ),
            GaugeSpec(
                "onceshop_payments_unresolved_oldest_age_seconds",
                "Age of the oldest PENDING or UNKNOWN payment attempt (0 when there is none)",
                selectors.payments_unresolved_oldest_age_s,
            ),
        )
