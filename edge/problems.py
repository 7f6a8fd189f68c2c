"""The pages behind every problem's ``type`` (``/problems/<code>``).

RFC 9457 makes ``type`` a URI a reader can open. The pages are generated from
the code that answers with them, so they cannot drift: every ``ApplicationError``
subclass (declared next to the domain that raises it), plus the framework
errors ``edge.errors`` maps to a code. One page per code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.views import defaults
from django.views.decorators.http import require_GET
from rest_framework.exceptions import ParseError

from edge.errors import ApplicationError, InternalError, problem_response
from edge.handler import _DRF_CODES, as_application_error
from edge.problem_meanings import MEANINGS

# Where the answers are for programs: an error there is problem+json even when
# Django answers it (a path no URL matches, a bad Host), not an HTML page.
API_PREFIXES = ("/api/", "/sandbox/")


@dataclass(frozen=True)
class ProblemType:
    code: str
    status: int
    title: str
    detail: str  # the default ``detail`` a client receives
    meaning: str  # what it means, for whoever received it (edge/problem_meanings.py)
    final: bool  # stored on the key and replayed, or not
    raised_in: str  # the module that declares it


def _subclasses(base: type[ApplicationError]) -> list[type[ApplicationError]]:
    found: list[type[ApplicationError]] = []
    for cls in base.__subclasses__():
        found += [cls, *_subclasses(cls)]
    return found


def problem_types() -> dict[str, ProblemType]:
    """Every code the API answers with, by code (the first declaration of a code wins)."""
    catalogue: dict[str, ProblemType] = {}
    classes: list[type[ApplicationError]] = [ApplicationError, *_subclasses(ApplicationError)]
    for cls in classes:
        catalogue.setdefault(
            cls.code,
            ProblemType(
                code=cls.code,
                status=cls.status,
                title=cls.title,
                detail=cls.default_detail,
                meaning=MEANINGS.get(cls.code, ""),
                final=cls.final,
                raised_in=cls.__module__,
            ),
        )
    for drf_cls, code in _DRF_CODES:
        catalogue.setdefault(
            code,
            ProblemType(
                code=code,
                status=drf_cls.status_code,
                title=code.replace("-", " ").capitalize(),
                detail=str(drf_cls.default_detail),
                meaning=MEANINGS.get(code, ""),
                final=False,
                raised_in=f"rest_framework ({drf_cls.__name__})",
            ),
        )
    return dict(sorted(catalogue.items()))


@require_GET
def problem_list(request: HttpRequest) -> HttpResponse:
    return render(request, "problems/list.html", {"problems": problem_types().values()})


@require_GET
def problem_detail(request: HttpRequest, code: str) -> HttpResponse:
    found = problem_types().get(code)
    if found is None:
        raise Http404(f"No problem type {code!r}.")
    meaning = code_spans(gettext(found.meaning))
    return render(request, "problems/detail.html", {"problem": found, "meaning": meaning})


_CODE_SPAN = re.compile(r"`([^`]+)`")


def code_spans(text: str) -> SafeString:
    """Text written for both the README and a page: its `code` spans as <code>.

    Escaped first, so only the spans become markup (the README shows the same
    sentence as Markdown, where the backticks are the markup). Text that is
    escaped already (safe: what ``{% translate x as name %}`` hands a template)
    is taken as it is: escaped twice, an apostrophe would reach the reader as
    ``&#x27;``.
    """
    escaped = conditional_escape(text)
    return mark_safe(_CODE_SPAN.sub(r"<code>\1</code>", escaped))  # noqa: S308 - escaped


def _api_or_page(
    page: Callable[..., HttpResponse], error: Callable[[], ApplicationError]
) -> Callable[..., HttpResponse]:
    """A Django error handler: problem+json under the API's paths, ``page`` elsewhere."""

    def handler(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if request.path == "/api" or request.path.startswith(API_PREFIXES):
            return problem_response(error())
        return page(request, *args, **kwargs)

    return handler


# The URL confs' handler400/403/404/500 (config/urls.py, demo/provider_urls.py).
bad_request = _api_or_page(defaults.bad_request, lambda: as_application_error(ParseError()))
permission_denied = _api_or_page(
    defaults.permission_denied, lambda: as_application_error(PermissionDenied())
)
page_not_found = _api_or_page(defaults.page_not_found, lambda: as_application_error(Http404()))
server_error = _api_or_page(defaults.server_error, InternalError)
