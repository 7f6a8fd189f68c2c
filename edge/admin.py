"""The admin's read-only base for rows that record money, stock or answers.

Payments, ledger entries, orders, inventory movements, notifications and
idempotency records are written by services, each in one transaction with its
constraints and conditional updates (a refund, a cancel, a settle). A form that
added, edited or deleted such a row would bypass all of that, so the admin only
shows them: no Add link, no Save, no Delete, and a note saying where changes go.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from operator import attrgetter
from typing import Any, ClassVar

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from edge.money import money


class MoneyColumns:
    """Amounts shown as a person reads them: "128.00 CNY", not 12800.

    ``money_fields`` maps each amount field (minor units) to where its currency is
    (a field of the row, or one reached through a relation: ``"order.currency"``).
    The list and a row's read-only page show them through ``edge.money``; a form
    that edits an amount keeps its field as it is.
    """

    model: Any
    money_fields: ClassVar[dict[str, str]] = {}

    @cached_property
    def _money_columns(self) -> dict[str, Callable[[Any], str]]:
        return {
            name: _money_column(self.model, name, currency)
            for name, currency in self.money_fields.items()
        }

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = self._money_columns
        shown = super().get_list_display(request)  # type: ignore[misc]
        return [columns.get(name, name) if isinstance(name, str) else name for name in shown]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The amount's own name stays in the list, so no form ever edits it; its column
        # joins it (a form's fields must be read-only or the model's).
        names = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        columns = self._money_columns
        return names + [columns[name] for name in names if name in columns]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A read-only amount is shown once, by its column, where the field would be.
        readonly = [
            name
            for name in super().get_readonly_fields(request, obj)  # type: ignore[misc]
            if isinstance(name, str)
        ]
        columns = {name: column for name, column in self._money_columns.items() if name in readonly}
        fields = super().get_fields(request, obj)  # type: ignore[misc]
        shown = [columns.get(name, name) if isinstance(name, str) else name for name in fields]
        return list(dict.fromkeys(shown))


def _money_column(model: Any, name: str, currency: str) -> Callable[[Any], str]:
    currency_of = attrgetter(currency)

    @admin.display(description=model._meta.get_field(name).verbose_name, ordering=name)
    def column(row: Any) -> str:
        return money(getattr(row, name), currency_of(row))

    column.__name__ = name  # the column's CSS class, field-<name>, as for the field
    return column


READ_ONLY_NOTE = (
    "Read-only here: the admin never adds, edits or deletes these rows. {changed_through}"
)


class _NoWrites:
    """Every field shown read-only; no add, change or delete permission for anyone."""

    model: Any

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields] + list(
            getattr(self, "readonly_fields", ())
        )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(MoneyColumns, _NoWrites, admin.ModelAdmin):
    """Shown, never added, changed or deleted from the admin."""

    change_list_template = "admin/read_only_change_list.html"
    change_form_template = "admin/read_only_change_form.html"
    # Said on every page of the model: how this kind of row does change.
    changed_through = "They change only through the services, each in one transaction."

    def _note(self, extra_context: dict[str, Any] | None) -> dict[str, Any]:
        note = READ_ONLY_NOTE.format(changed_through=self.changed_through)
        return {"read_only_note": note, **(extra_context or {})}

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, self._note(extra_context))

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, self._note(extra_context))


class WrittenElsewhereAdmin(MoneyColumns, admin.ModelAdmin):
    """Written by a job only (an import, the reconciler); kept for the record: no add,
    no delete, every field read-only. Its admin actions (resolving a discrepancy, say)
    still go through their services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]


class ReadOnlyInline(MoneyColumns, _NoWrites, admin.TabularInline):
    """An inline of a read-only parent: no "Add another", no delete box, no edits."""

    extra = 0
