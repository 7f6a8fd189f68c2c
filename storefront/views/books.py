"""The books: the four tables and the wallets side by side, refreshed live."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.translation import gettext_noop
from django.views.decorators.http import require_GET

from reconcile.statement_report import statement_books
from storefront.access import may_see_books, refused
from storefront.books import books_snapshot

# The sections the page's script replaces on each refresh: element id -> template.
LIVE_SECTIONS = {
    "books-verdict": "storefront/_books_verdict.html",
    "books-tables": "storefront/_books_tables.html",
    "books-waiting": "storefront/_books_waiting.html",
    "books-statements": "storefront/_books_statements.html",
    "books-gauges": "storefront/_books_gauges.html",
}
REFUSED = gettext_noop("The books are for staff, or for anyone logged in while the demo runs.")


@require_GET
def page(request: HttpRequest) -> HttpResponse:
    if not may_see_books(request.user):
        return refused(request, REFUSED)
    context = {
        "books": books_snapshot(),
        "statements": statement_books(),
        "sections": LIVE_SECTIONS,
    }
    return render(request, "storefront/books.html", context)


@require_GET
def live(request: HttpRequest) -> HttpResponse:
    """The same sections, rendered by the same templates, as JSON for the polling script."""
    if not may_see_books(request.user):
        return JsonResponse({"detail": REFUSED}, status=403)
    books = books_snapshot()
    context = {"books": books, "statements": statement_books()}
    fragments = {
        element: render_to_string(template, context, request=request)
        for element, template in LIVE_SECTIONS.items()
    }
    return JsonResponse({"at": books.at.isoformat(), "fragments": fragments})
