from django.apps import AppConfig


class StatementsConfig(AppConfig):
    """The provider's daily statement, read against the ledger (docs/design.md, "Statements")."""

    name = "operations.statements"
    label = "statements"
    verbose_name = "Statements"

    def ready(self) -> None:
        from observability.metrics.gauges import count_and_age_gauges, register
        from operations.statements.selectors import discrepancies_open

        # What the daily statement left for people (docs/operating.md).
        register(
            *count_and_age_gauges(
                "onceshop_statement_discrepancies_open",
                "statement discrepancy not resolved yet (invariant 7)",
                discrepancies_open,
            ),
        )
