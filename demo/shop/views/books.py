"""The books: the four tables and the wallets side by side, refreshed live."""

import contextlib

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.translation import gettext_noop
from django.views.decorators.http import require_GET, require_POST

from config.dbrouter import stale_reads
from demo.shop.access import is_staff, may_see_books, refused
from demo.shop.books import books_snapshot
from demo.shop.forms import CaseActForm
from operations.statements.report import statement_books
from reconcile.desk.actions import CaseActionRefused, case_act
from reconcile.desk.models import Case

# The sections the page's script replaces on each refresh: element id -> template.
LIVE_SECTIONS = {
    "books-verdict": "storefront/_books_verdict.html",
    "books-tables": "storefront/_books_tables.html",
    "books-waiting": "storefront/_books_waiting.html",
    "books-cases": "storefront/_books_cases.html",
    "books-statements": "storefront/_books_statements.html",
    "books-gauges": "storefront/_books_gauges.html",
}
CASES_FOR_STAFF = gettext_noop("Cases are acted on by staff.")
REFUSED = gettext_noop("The books are for staff, or for anyone logged in while the demo runs.")


@require_GET
def page(request: HttpRequest) -> HttpResponse:
    if not may_see_books(request.user):
        return refused(request, REFUSED)
    # Who asks was read from the primary (above); the books may be a moment old.
    with stale_reads():
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
    with stale_reads():
        books = books_snapshot()
        context = {"books": books, "statements": statement_books()}
    fragments = {
        element: render_to_string(template, context, request=request)
        for element, template in LIVE_SECTIONS.items()
    }
    return JsonResponse({"at": books.at.isoformat(), "fragments": fragments})


@require_POST
def case_act_view(request: HttpRequest, case_id: int) -> HttpResponse:
    """One click on a case: the action chosen, with its reason, through the desk's service."""
    if not is_staff(request.user):
        return refused(request, CASES_FOR_STAFF)
    # A refused action (no reason, not one that fits) or a case that is not there: the
    # page shows the case as it is, still open or gone from the list.
    form = CaseActForm(request.POST)
    if not form.is_valid():
        # No reason, a NUL, a note over its length: refused before anything is looked up.
        return HttpResponseBadRequest(form.errors.as_text(), content_type="text/plain")
    with contextlib.suppress(Case.DoesNotExist, CaseActionRefused):
        case_act(
            case_id=case_id,
            action=form.cleaned_data["action"],
            note=form.cleaned_data["note"],
            user=request.user,  # type: ignore[arg-type]  # staff: logged in
        )
    return redirect("storefront:books")
