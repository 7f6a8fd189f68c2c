"""Stray captures in the admin, read-only; and the operator's desk: an open case offers
the actions that fit, each with a reason. (The statement's rows: operations/statements/admin.py.)"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from edge.admin import WrittenElsewhereAdmin
from reconcile.desk.actions import ALREADY_RESOLVED, CaseActionRefused, case_act
from reconcile.desk.models import Case, CaseActionKind, CaseState
from reconcile.desk.selectors import case_actions
from reconcile.models import StrayCapture


@admin.register(StrayCapture)
class StrayCaptureAdmin(WrittenElsewhereAdmin):
    list_display = ("trade_no", "out_trade_no", "amount", "currency", "refund_status", "refund_id")
    money_fields = {"amount": "currency"}
    list_filter = ("refund_status",)


class CaseActForm(forms.ModelForm):
    """An open case's one form: the action that fits, and why (both required)."""

    action = forms.ChoiceField(choices=[])
    note = forms.CharField(
        widget=forms.Textarea,
        required=True,
        help_text="Why (kept with your name and the time; it cannot be undone).",
    )

    class Meta:
        model = Case
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offered = case_actions(self.instance)
        action = self.fields["action"]
        assert isinstance(action, forms.ChoiceField)
        action.choices = [(a, CaseActionKind(a).label) for a in offered]


@admin.register(Case)
class CaseAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "reference", "state", "opened_at", "summary", "resolved_by")
    list_filter = ("state", "kind")
    search_fields = ("reference", "summary", "resolution")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the machine opens cases

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a resolution is recorded, never a delete

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A resolved case is kept for the record: its page is read-only (no form, no save).
        if obj is not None and obj.state != CaseState.OPEN:
            return False
        return super().has_change_permission(request, obj)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # A save of a case resolved meanwhile (a double click, a second tab, another
        # person): said plainly on its read-only page, never a 403 or a 500.
        if request.method == "POST":
            case = Case.objects.filter(pk=object_id).only("state").first()
            if case is not None and case.state != CaseState.OPEN:
                self.message_user(
                    request, f"case {case.pk} is {ALREADY_RESOLVED}", messages.WARNING
                )
                return redirect(request.path)
        return super().change_view(request, object_id, form_url, extra_context)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is not None and obj.state == CaseState.OPEN:
            kwargs["form"] = CaseActForm
            kwargs["fields"] = ["action", "note"]
        return super().get_form(request, obj, change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        shown = [field.name for field in Case._meta.fields] + ["history"]
        if obj is not None and obj.state == CaseState.OPEN:
            shown += ["action", "note"]
        return [(None, {"fields": shown})]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in Case._meta.fields] + ["history"]

    @admin.display(description="actions taken")
    def history(self, obj: Case) -> str:
        return (
            "; ".join(
                f"{a.at:%Y-%m-%d %H:%M} {a.action} by {a.by_name}"
                + (f", approved by {a.approved_by.get_username()}" if a.approved_by else "")
                + f": {a.note} ({a.outcome})"
                for a in obj.actions.select_related("approved_by")
            )
            or "-"
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # Through the service (conditional on the case being open, recorded), not obj.save().
        try:
            result = case_act(
                case_id=obj.pk,
                action=form.cleaned_data["action"],
                note=form.cleaned_data["note"],
                user=request.user,  # type: ignore[arg-type]  # the admin serves logged-in staff
            )
        except CaseActionRefused as refused:
            self.message_user(request, f"case {obj.pk}: {refused}", messages.ERROR)
            return
        self.message_user(
            request, result.message, messages.SUCCESS if result.acted else messages.WARNING
        )
