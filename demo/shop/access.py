"""Who may see what: the demo-only pages and the staff-only chaos action.

Refusals are pages that say why in words (403), never a bare error; to a visitor
who is not logged in, where a login would let them in, the page links to the
login, which brings them back. The rules:

- Chaos panel and the story button: only with ``DEMO_MODE`` on, and only for
  staff or the seeded demo users. A real deployment never shows them.
- Switching the provider's faults and killing the worker: staff only, even in
  demo mode (an operator's acts on the provider and the machine, not a
  customer's on the shop). Customers see the panel and send requests from it.
- The books: staff always; any logged-in user in demo mode, where seeing the
  books agree is the point.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext

from demo.shop.management.commands.seed_demo import DEMO_USERS

# The seeded accounts (seed_demo is their one definition).
DEMO_USERNAMES = frozenset(username for username, _password, _staff in DEMO_USERS)

ViewFunc = TypeVar("ViewFunc", bound=Callable[..., HttpResponse])


def is_staff(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user.is_authenticated and getattr(user, "is_staff", False))


def may_use_chaos(user: AbstractBaseUser | AnonymousUser) -> bool:
    if not settings.DEMO_MODE or not user.is_authenticated:
        return False
    return is_staff(user) or user.get_username() in DEMO_USERNAMES


def may_see_books(user: AbstractBaseUser | AnonymousUser) -> bool:
    return is_staff(user) or bool(settings.DEMO_MODE and user.is_authenticated)


def user_id(request: HttpRequest) -> int:
    """The logged-in user's id (for views that require a login)."""
    pk = request.user.pk
    assert isinstance(pk, int), "the view must require a logged-in user"
    return pk


def refused(request: HttpRequest, reason: str, *, login_helps: bool = True) -> HttpResponse:
    """403, saying why; a visitor who is not logged in also gets a login link, with
    ``next`` back here, unless no login would let anyone in (``login_helps``)."""
    context = {"reason": reason, "login_next": None}
    if login_helps and not request.user.is_authenticated:
        context["login_next"] = _back_here(request)
    return render(request, "storefront/refused.html", context, status=403)


def _back_here(request: HttpRequest) -> str:
    """Where the login brings the visitor back: this page, or for a form that was
    posted, the page that posted it (the form's URL answers a GET with a redirect).
    The login checks ``next`` again: only a path of this site is followed."""
    if request.method == "GET":
        return request.get_full_path()
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.netloc == request.get_host() and referer.path.startswith("/"):
        return referer._replace(scheme="", netloc="").geturl()
    return reverse("storefront:home")


def chaos_required(view: ViewFunc) -> ViewFunc:
    """Demo mode, and staff or a demo user; otherwise a 403 page saying which."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.DEMO_MODE:
            return refused(
                request,
                gettext(
                    "The chaos panel exists only in demo mode (DEMO_MODE=true, as `make demo` "
                    "sets it). A real deployment never lets a visitor script failures."
                ),
                login_helps=False,
            )
        if not may_use_chaos(request.user):
            return refused(
                request,
                gettext(
                    "The chaos panel is for staff and the demo users (%(users)s). Log in as "
                    "one of them."
                )
                % {"users": ", ".join(sorted(DEMO_USERNAMES))},
            )
        return view(request, *args, **kwargs)

    return cast(ViewFunc, guarded)


def staff_required(view: ViewFunc) -> ViewFunc:
    """Staff only (after the chaos checks): the operator's actions."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_staff(request.user):
            return refused(request, gettext("Only staff may do this. Log in as the staff user."))
        return view(request, *args, **kwargs)

    return cast(ViewFunc, guarded)
