from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import obtain_auth_token

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
    path("", include("storefront.urls")),
]
