from django.urls import path

from callbacks.api import SandboxCallbackApi

urlpatterns = [
    path("callbacks/sandbox/", SandboxCallbackApi.as_view(), name="callback-sandbox"),
]
