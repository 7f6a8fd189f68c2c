from django.conf import settings
from django.contrib import admin
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from edge.auth_api import TokenObtainApi
from edge.problems import problem_detail, problem_list
from edge.throttling import login_throttled

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token/", TokenObtainApi.as_view(), name="auth-token"),
    path("", include("orders.urls")),
    path("", include("payments.urls")),
    path("", include("callbacks.urls")),
    path("", include("idempotency.urls")),
]

# /healthz, /readyz and /metrics are answered by the first middleware, before host
# checks, sessions and throttles (observability/middleware.py), so they are not here.
urlpatterns = [
    # Before the admin's own routes: its login form posts here, throttled.
    path("admin/login/", login_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script from a URL (?script), not
    # inline, so the page runs under the Content-Security-Policy (edge/csp.py).
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="schema", template_name="api_docs/swagger_ui.html"
        ),
        name="swagger-ui",
    ),
    # Every problem's `type`: /problems/<code>, exactly as the errors write it.
    path("problems/", problem_list, name="problems"),
    path("problems/<slug:code>", problem_detail, name="problem"),
    # The language switcher posts here (Django's set_language: a remembered cookie).
    path("i18n/", include("django.conf.urls.i18n")),
]

# The demo's pages, in the demo profile only (settings.DEMO_APPS): a deployed shop
# serves the API, the admin and the schema, nothing of the demo.
if "demo.shop" in settings.DEMO_APPS:
    urlpatterns += [
        # Browsers ask for it on every page the icon link does not cover (admin, Swagger).
        path("favicon.ico", RedirectView.as_view(url=static("storefront/favicon.svg"))),
        path("", include("demo.shop.urls")),
    ]

# The sandbox provider is another company's API: routed only in a process that plays
# it (SANDBOX_ENABLED), never by a deployed shop, where /sandbox/ is a 404.
if settings.SANDBOX_ENABLED and "demo.sandbox" in settings.DEMO_APPS:
    urlpatterns.insert(2, path("sandbox/", include("demo.sandbox.urls")))

# Errors Django answers itself (no URL matched, a bad Host): problem+json under /api/.
handler400 = "edge.problems.bad_request"
handler403 = "edge.problems.permission_denied"
handler404 = "edge.problems.page_not_found"
handler500 = "edge.problems.server_error"
