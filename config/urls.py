from django.conf import settings
from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
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

# A plugin's pages, after the shop's own URLs (config/plugins.py): the demo's, in the
# demo profile only. A deployed shop serves the API, the admin and the schema.
urlpatterns += [path("", include(urlconf)) for urlconf in settings.PLUGIN_URLCONFS]

# Errors Django answers itself (no URL matched, a bad Host): problem+json under /api/.
handler400 = "edge.problems.bad_request"
handler403 = "edge.problems.permission_denied"
handler404 = "edge.problems.page_not_found"
handler500 = "edge.problems.server_error"
