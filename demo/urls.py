"""The demo's URLs in the shop: config/urls.py includes them after its own, at the root,
in the demo profile only (settings.PLUGIN_URLCONFS, set by demo/plugin.py).
"""

from django.conf import settings
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView

urlpatterns: list[URLPattern | URLResolver] = []

# The sandbox provider is another company's API: routed only in a process that plays
# it (SANDBOX_ENABLED), never by a deployed shop, where /sandbox/ is a 404.
if settings.SANDBOX_ENABLED:
    urlpatterns.append(path("sandbox/", include("demo.sandbox.urls")))

urlpatterns += [
    # Browsers ask for it on every page the icon link does not cover (admin, Swagger).
    path("favicon.ico", RedirectView.as_view(url=static("storefront/favicon.svg"))),
    # The shop's pages.
    path("", include("demo.shop.urls")),
]
