from django.apps import AppConfig


class StorefrontConfig(AppConfig):
    """The demo shop's web pages: a person's view of the same flows the API runs."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "demo.shop"
    # The label the app had at the top of the tree: its tables, migrations, templates,
    # URL names and content types keep their names.
    label = "storefront"
    verbose_name = "Storefront (demo shop pages)"
