from django.contrib import admin

from idempotency.models import IdempotencyKey


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):
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
    readonly_fields = [field.name for field in IdempotencyKey._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False  # records are written by requests only
