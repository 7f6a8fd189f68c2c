"""My orders, one order (with its answers and timeline), its pay and refund buttons."""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET, require_POST

from demo.shop.access import user_id
from demo.shop.answers import Answer
from demo.shop.errors import RefundAmountInvalid
from demo.shop.forms import PayForm
from demo.shop.history import answer_events, answer_history, answer_record
from demo.shop.selectors import (
    my_order,
    my_orders,
    order_has_live_payment,
    order_timeline,
    pay_key_resumes,
)
from demo.shop.services import order_pay_submit, order_refund_submit, pay_key_new
from orders.models import Order

# The pay script numbers its clicks and retries; anything else is just "Pay".
MAX_LABEL_NUMBER = 999


def render_order(
    request: HttpRequest,
    *,
    order: Order,
    answer: Answer | None = None,
    answered: str = "",
    retry_key: str | None = None,
    refund_amount: str = "",
) -> HttpResponse:
    """The order page: every answer its requests got (kept across reloads), the timeline."""
    payable = order.status == Order.Status.UNPAID and not order_has_live_payment(order=order)
    answers = answer_history(user_id=order.user_id, number=order.number)
    context: dict[str, Any] = {
        "order": order,
        "answer": answer,  # the answer of the request that just ran (the last of answers)
        "answers": answers,
        "timeline": order_timeline(order=order, extra=answer_events(answers)),
        "payable": payable,
        "in_progress": order.status == Order.Status.UNPAID and not payable,
        # A retryable answer keeps its key (retry = the same request); anything else
        # is final for its key, so the next click is a new intent with a new key.
        "pay_key": (answered != "refund" and retry_key) or pay_key_new(),
        "retrying": retry_key is not None and answered != "refund",
        # The refund button follows the same key discipline as the pay button.
        "refund_key": (answered == "refund" and retry_key) or pay_key_new(),
        "refund_retrying": retry_key is not None and answered == "refund",
        # A retry must be the same request: the same amount as the first submit.
        "refund_amount": refund_amount if retry_key is not None else "",
        "provider_timeout_s": settings.PROVIDER_TIMEOUT_S,
    }
    return render(request, "storefront/order.html", context)


def order_answer_record(
    request: HttpRequest, *, order: Order, label: str, answer: Answer, key: str, note: str = ""
) -> None:
    answer_record(
        user_id=user_id(request),
        number=order.number,
        label=label,
        answer=answer,
        key=key,
        note=note,
    )


@login_required
@require_GET
def order_list(request: HttpRequest) -> HttpResponse:
    orders = my_orders(user_id=user_id(request))
    return render(request, "storefront/orders.html", {"orders": orders})


@login_required
@require_GET
def order_detail(request: HttpRequest, number: str) -> HttpResponse:
    return render_order(request, order=my_order(user_id=user_id(request), number=number))


def _wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _number(raw: str | None) -> int | None:
    return int(raw) if raw and raw.isdigit() and 0 < int(raw) <= MAX_LABEL_NUMBER else None


def _label(request: HttpRequest) -> str:
    """ "Click 2", "Click 1 (retry 3, same key)", or "Pay" for the plain form."""
    click, retry = _number(request.POST.get("click")), _number(request.POST.get("retry"))
    if click is None:
        return gettext("Pay")
    if retry:
        return gettext("Click %(click)s (retry %(retry)s, same key)") % {
            "click": click,
            "retry": retry,
        }
    return gettext("Click %(click)s") % {"click": click}


@require_POST
def order_pay(request: HttpRequest, number: str) -> HttpResponse:
    if not request.user.is_authenticated:
        # A stale session: the script gets words it can show, the form the login page.
        if _wants_json(request):
            return JsonResponse(
                {
                    "status": 401,
                    "summary": "401 not-authenticated",
                    "retry_same_key": False,
                    "why": gettext("Your session has ended: log in again. Nothing was attempted."),
                },
                status=401,
            )
        return redirect_to_login(reverse("storefront:order", kwargs={"number": number}))
    order = my_order(user_id=user_id(request), number=number)
    key = request.POST.get("idempotency_key", "")
    # Validated before it is looked up: a tampered field (a NUL, say) names no record,
    # and the service answers it in words.
    looked_up = PayForm(request.POST).is_valid()
    resumes = pay_key_resumes(user_id=user_id(request), key=key) if looked_up else ""
    answer = order_pay_submit(user_id=user_id(request), order_number=number, key=key)
    # The resume note holds only if this request ran (not a replay, not a 409).
    ran = not answer.replayed and (answer.stored or answer.status == 503)
    note = resumes if ran else ""
    order_answer_record(
        request, order=order, label=_label(request), answer=answer, key=key, note=note
    )
    order.refresh_from_db()
    if _wants_json(request):
        return JsonResponse({**answer.as_json(), "note": note, "order_status": order.status})
    return render_order(
        request,
        order=order,
        answer=answer,
        answered="pay",
        retry_key=key if answer.retry_same_key else None,
    )


@login_required
@require_POST
def order_refund(request: HttpRequest, number: str) -> HttpResponse:
    order = my_order(user_id=user_id(request), number=number)
    key = request.POST.get("idempotency_key", "")
    raw_amount = request.POST.get("amount", "").strip()
    # Blank: the whole refundable rest. Anything else the flow's API would refuse
    # is refused here in words, before anything runs.
    amount = int(raw_amount) if raw_amount.isdigit() and int(raw_amount) > 0 else None
    if raw_amount and amount is None:
        answer = Answer.from_error(RefundAmountInvalid())
    else:
        answer = order_refund_submit(
            user_id=user_id(request), order_number=number, key=key, amount=amount, reason=""
        )
    order_answer_record(request, order=order, label=gettext("Refund"), answer=answer, key=key)
    order.refresh_from_db()
    return render_order(
        request,
        order=order,
        answer=answer,
        answered="refund",
        retry_key=key if answer.retry_same_key else None,
        refund_amount=raw_amount,
    )
