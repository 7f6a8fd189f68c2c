"""Log in and out with the session (the API uses tokens; the pages use this)."""

from typing import Any

from django.conf import settings
from django.contrib.auth.views import LoginView

from demo.shop.management.commands.seed_demo import DEMO_USERS


class ShopLoginView(LoginView):
    template_name = "storefront/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        # The seeded passwords are printed only in demo mode: a real deployment has
        # no known passwords to show, and must never show any.
        context["demo_users"] = (
            [(username, password, staff) for username, password, staff in DEMO_USERS]
            if settings.DEMO_MODE
            else []
        )
        context["came_for"] = self.request.GET.get(self.redirect_field_name, "")
        return context
