from django.urls import path

from callbacks.api import SandboxCallbackApi, StripeCallbackApi

urlpatterns = [
    path("callbacks/sandbox/", SandboxCallbackApi.as_view(), name="callback-sandbox"),
    path("callbacks/stripe/", StripeCallbackApi.as_view(), name="callback-stripe"),
]
