from django.urls import path

from idempotency.api import IdempotencyKeyDetailApi

urlpatterns = [
    path(
        "idempotency-keys/<str:key>/",
        IdempotencyKeyDetailApi.as_view(),
        name="idempotency-key-detail",
    ),
]
