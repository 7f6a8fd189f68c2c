"""The admin's read-only base for rows that record money, stock or answers.

Payments, ledger entries, orders, inventory movements, notifications and
idempotency records are written by services, each in one transaction with its
constraints and conditional updates (a refund, a cancel, a settle). A form that
added, edited or deleted such a row would bypass all of that, so the admin only
shows them: no Add link, no Save, no Delete, and a note saying where changes go.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

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


class ReadOnlyAdmin(_NoWrites, admin.ModelAdmin):
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


class ReadOnlyInline(_NoWrites, admin.TabularInline):
    """An inline of a read-only parent: no "Add another", no delete box, no edits."""

    extra = 0
