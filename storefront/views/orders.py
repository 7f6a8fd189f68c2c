"""My orders, one order (with its timeline) and its pay and refund buttons."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from orders.models import Order
from storefront.access import user_id
from storefront.answers import Answer
from storefront.errors import RefundAmountInvalid
from storefront.selectors import my_order, my_orders, order_has_live_payment, order_timeline
from storefront.services import order_pay_submit, order_refund_submit, pay_key_new


def render_order(
    request: HttpRequest,
    *,
    order: Order,
    answer: Answer | None = None,
    answered: str = "",
    retry_key: str | None = None,
    refund_amount: str = "",
) -> HttpResponse:
    """The order page, optionally with the answer of the request that just ran."""
    payable = order.status == Order.Status.UNPAID and not order_has_live_payment(order=order)
    context: dict[str, Any] = {
        "order": order,
        "answer": answer,
        "answered": answered,
        "timeline": order_timeline(order=order),
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
    }
    return render(request, "storefront/order.html", context)


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
                    "why": "Your session has ended: log in again. Nothing was attempted.",
                },
                status=401,
            )
        return redirect_to_login(reverse("storefront:order", kwargs={"number": number}))
    order = my_order(user_id=user_id(request), number=number)
    key = request.POST.get("idempotency_key", "")
    answer = order_pay_submit(user_id=user_id(request), order_number=number, key=key)
    order.refresh_from_db()
    if _wants_json(request):
        return JsonResponse({**answer.as_json(), "order_status": order.status})
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
    order.refresh_from_db()
    return render_order(
        request,
        order=order,
        answer=answer,
        answered="refund",
        retry_key=key if answer.retry_same_key else None,
        refund_amount=raw_amount,
    )
