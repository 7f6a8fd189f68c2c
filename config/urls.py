from django.contrib import admin
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import obtain_auth_token

from config.problems import problem_detail, problem_list

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token/", obtain_auth_token, name="auth-token"),
    path("", include("orders.urls")),
    path("", include("payments.urls")),
    path("", include("callbacks.urls")),
    path("", include("idempotency.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("sandbox/", include("sandbox.urls")),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    # Every problem's `type`: /problems/<code>, exactly as the errors write it.
    path("problems/", problem_list, name="problems"),
    path("problems/<slug:code>", problem_detail, name="problem"),
    # Browsers ask for it on every page the icon link does not cover (admin, Swagger).
    path("favicon.ico", RedirectView.as_view(url=static("storefront/favicon.svg"))),
    path("", include("storefront.urls")),
]
