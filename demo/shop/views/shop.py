"""The catalogue (home) and the checkout behind the entry gate."""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext
from django.views.decorators.http import require_GET

from demo.shop.access import DEMO_USERNAMES, may_use_chaos, user_id
from demo.shop.answers import Answer
from demo.shop.errors import CheckoutTokenInvalid, CheckoutUnavailable
from demo.shop.forms import CheckoutForm
from demo.shop.selectors import catalogue, my_order
from demo.shop.services import checkout_submit, checkout_token_issue
from demo.shop.story import ABOUT_S as STORY_ABOUT_S
from demo.shop.views.orders import _wants_json, order_answer_record, render_order
from edge.errors import problem_response


def _session_key(request: HttpRequest) -> str:
    if request.session.session_key is None:  # a logged-in user always has one
        request.session.save()
    key = request.session.session_key
    assert key is not None
    return key


def _render_home(
    request: HttpRequest, *, form: CheckoutForm | None = None, answer: Answer | None = None
) -> HttpResponse:
    products = list(catalogue())
    notice = ""
    # A submit that found Redis down: no new token is tried for the fresh form either.
    unavailable: CheckoutUnavailable | None = None
    if answer is not None and answer.code == CheckoutUnavailable.code:
        unavailable = CheckoutUnavailable()
    # A token only for a form that is shown, with something in it to buy: a visitor,
    # or an empty catalogue, costs no Redis write.
    something_to_buy = any(product.stock > 0 for product in products)
    if request.user.is_authenticated and form is None and something_to_buy and not unavailable:
        try:
            # One token per rendering of the form: a new checkout intent.
            token = checkout_token_issue(
                session_key=_session_key(request), user_id=user_id(request)
            )
            form = CheckoutForm(products=products, initial={"checkout_token": token})
        except CheckoutUnavailable as error:
            notice, unavailable = error.detail, error
    if unavailable is not None and _wants_json(request):
        return problem_response(unavailable)
    context: dict[str, Any] = {
        "products": products,
        "form": form,
        "answer": answer,
        "notice": notice,
        "may_use_chaos": may_use_chaos(request.user),
        # The story's card shows in demo mode to everyone; who may run it, runs it.
        "demo_mode": settings.DEMO_MODE,
        "demo_users": ", ".join(sorted(DEMO_USERNAMES)),
        "story_about_s": STORY_ABOUT_S,
    }
    response = render(request, "storefront/home.html", context)
    if unavailable is not None:
        # The checkout cannot work without Redis (its one-time tokens): the page says
        # so with 503 and when to come back, never a 500 nor a form that cannot submit.
        response.status_code = unavailable.status
        for name, value in unavailable.headers.items():
            response[name] = value
    return response


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return _render_home(request)


@require_GET
def stock_live(request: HttpRequest) -> JsonResponse:
    """Live stock for the catalogue's polling script: {sku: stock}."""
    return JsonResponse({"stock": {p.sku: p.stock for p in catalogue()}})


@login_required
def checkout(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":  # back/forward onto the URL: the catalogue, not a 405
        return redirect("storefront:home")
    form = CheckoutForm(request.POST, products=catalogue())
    if not form.is_valid():
        if "checkout_token" in form.errors:
            # A missing or altered token: never consumed, never a key; a fresh form.
            answer = Answer.from_error(
                CheckoutTokenInvalid(
                    gettext(
                        "This checkout form's token was altered or is missing. Nothing was "
                        "ordered: here is a fresh form."
                    )
                )
            )
            return _render_home(request, answer=answer)
        # Field errors: shown next to their fields; the same token stays valid.
        return _render_home(request, form=form)
    answer = checkout_submit(
        user_id=user_id(request),
        session_key=_session_key(request),
        token=form.cleaned_data["checkout_token"],
        lines=form.lines(),
    )
    if answer.status == 201 and isinstance(answer.body, dict):
        # Rendered here, not redirected: reloading this page resubmits the same form,
        # the same token, and shows the stored answer replayed. That is the lesson.
        order = my_order(user_id=user_id(request), number=str(answer.body["number"]))
        order_answer_record(
            request,
            order=order,
            label=gettext("Checkout"),
            answer=answer,
            key=form.cleaned_data["checkout_token"],
        )
        return render_order(request, order=order, answer=answer)
    # The token is spent (or never was ours): a new intent gets a new form.
    return _render_home(request, answer=answer)
