"""The statement's rows in the admin: read-only, except resolving a discrepancy with a note."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from edge.admin import WrittenElsewhereAdmin
from operations.statements.discrepancies import discrepancy_resolve
from operations.statements.models import StatementDiscrepancy, StatementImport, StatementLine


@admin.register(StatementImport)
class StatementImportAdmin(WrittenElsewhereAdmin):
    list_display = ("day", "provider", "lines", "downloads", "covered_until", "matched_at", "error")


@admin.register(StatementLine)
class StatementLineAdmin(WrittenElsewhereAdmin):
    list_display = (
        "provider_id",
        "kind",
        "reference",
        "amount",
        "currency",
        "outcome",
        "settled_at",
    )
    list_filter = ("outcome", "kind", "currency")
    money_fields = {"amount": "currency"}
    search_fields = ("provider_id", "reference")


class ResolveForm(forms.ModelForm):
    resolution = forms.CharField(
        widget=forms.Textarea,
        required=True,
        help_text="How it was resolved (kept with your name and the time; it cannot be undone).",
    )

    class Meta:
        model = StatementDiscrepancy
        fields = ["resolution"]


@admin.register(StatementDiscrepancy)
class StatementDiscrepancyAdmin(admin.ModelAdmin):
    list_display = ("day", "kind", "reason", "opened_at", "resolved_at", "resolved_by")
    list_filter = ("kind", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("reason", "resolution")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a resolution is recorded, never a delete

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is not None and obj.resolved_at is None:
            kwargs["form"] = ResolveForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = [field.name for field in StatementDiscrepancy._meta.fields]
        if obj is not None and obj.resolved_at is None:
            fields.remove("resolution")  # the one thing staff write: how it was resolved
        return fields

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # Through the service (conditional, with who and when), not obj.save().
        assert request.user.pk is not None  # the admin serves logged-in staff only
        discrepancy_resolve(
            discrepancy_id=obj.pk, user_id=request.user.pk, note=form.cleaned_data["resolution"]
        )
