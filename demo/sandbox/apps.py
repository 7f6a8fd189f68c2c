from django.apps import AppConfig


class SandboxConfig(AppConfig):
    name = "demo.sandbox"
    # Its tables (sandbox_*), migrations and content types keep their names.
    label = "sandbox"
    verbose_name = "Sandbox payment provider"
