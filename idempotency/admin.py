from django.contrib import admin

from edge.admin import ReadOnlyAdmin
from idempotency.models import IdempotencyKey


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(ReadOnlyAdmin):
    list_display = (
        "key",
        "user",
        "method",
        "path",
        "recovery_point",
        "response_status",
        "locked_at",
        "created_at",
        "finished_at",
    )
    list_filter = ("recovery_point", "response_status")
    search_fields = ("key", "user__username", "path")
    changed_through = (
        "Records are written by the requests that carry the keys; the reaper removes "
        "them after IDEMPOTENCY_KEY_TTL."
    )
