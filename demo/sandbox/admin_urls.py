"""The provider server's admin (``/admin/`` in demo/provider_urls.py): its tables only.

A URL module of its own, so the provider's URL conf names it by string (config
never imports the sandbox). Its login posts are throttled like every login.
"""

from django.urls import path

from demo.sandbox.admin import provider_site
from edge.throttling import login_throttled

# The namespace the admin's templates reverse ("admin:index"), as AdminSite.urls has it.
app_name = "admin"

urlpatterns = [
    # Before the site's own routes: its login form posts here, throttled.
    path("login/", login_throttled(provider_site.login)),
    *provider_site.get_urls(),
]
