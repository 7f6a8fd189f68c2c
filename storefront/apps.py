from django.apps import AppConfig


class StorefrontConfig(AppConfig):
    """The demo shop's web pages: a person's view of the same flows the API runs."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "storefront"
    verbose_name = "Storefront (demo shop pages)"
