"""The URLs of the demo's provider server (SANDBOX_ONLY): the sandbox and its admin.

The provider is another company: its server answers its own API under /sandbox/
(whose index lists it) and shows its tables, and only those, in its own admin
site (demo/sandbox/admin_urls.py). Its root leads to that index, never to a second copy
of the shop.
"""

from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", include("demo.sandbox.admin_urls")),
    path("sandbox/", include("demo.sandbox.urls")),
    path("favicon.ico", RedirectView.as_view(url=static("storefront/favicon.svg"))),
    path("", RedirectView.as_view(url="/sandbox/")),
]

# Errors Django answers itself (no URL matched, a bad Host): problem+json under /api/.
handler400 = "edge.problems.bad_request"
handler403 = "edge.problems.permission_denied"
handler404 = "edge.problems.page_not_found"
handler500 = "edge.problems.server_error"
