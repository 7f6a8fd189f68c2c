"""The chaos panel (demo mode only): script failures and watch the shop stay correct."""

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext, gettext_noop
from django.views.decorators.http import require_GET, require_POST

from demo.shop.access import chaos_required, is_staff, staff_required, user_id
from demo.shop.chaos import (
    BURST_POOL,
    BURST_REQUESTS,
    BURST_WHAT_SHOULD_HAPPEN,
    FAULT_MODE_BY_NAME,
    FAULT_MODES,
    KILL_NOT_FROM_HERE,
    KILL_WHAT_SHOULD_HAPPEN,
    NO_SCRIPTED_FAULTS,
    REPEAT_WHAT_SHOULD_HAPPEN,
    chaos_burst,
    chaos_can_kill_here,
    chaos_fault_arm,
    chaos_fault_clear,
    chaos_kill_worker,
    chaos_repeat,
    chaos_takes_faults,
    visibility_timeout_s,
)
from demo.shop.client import ShopUnreachable
from demo.shop.errors import ChaosUnavailable, RedeliveryUnavailable
from demo.shop.forms import FaultForm
from demo.shop.redelivery import (
    chaos_redelivery_kill,
    chaos_redelivery_start,
    redelivery_attempts,
    redelivery_what_should_happen,
)
from demo.shop.selectors import active_faults


def _unavailable(request: HttpRequest, error: RedeliveryUnavailable) -> HttpResponse:
    """The panel, saying Redis is away, with 503 and when to come back."""
    response = _panel(request, failed=gettext(str(error.detail)), redelivery=False)
    response.status_code = error.status
    for name, value in error.headers.items():
        response[name] = value
    return response


def _panel(request: HttpRequest, *, bound: FaultForm | None = None, **result: Any) -> HttpResponse:
    modes = [
        (
            fault,
            bound
            if bound is not None and bound.data.get("mode") == fault.mode
            else FaultForm(mode=fault.mode),
        )
        for fault in FAULT_MODES
    ]
    context: dict[str, Any] = {
        "modes": modes,
        "faults": list(active_faults()),
        "takes_faults": chaos_takes_faults(),
        "faults_not_here": NO_SCRIPTED_FAULTS,
        "repeat_explained": REPEAT_WHAT_SHOULD_HAPPEN,
        "burst_explained": BURST_WHAT_SHOULD_HAPPEN,
        "kill_explained": KILL_WHAT_SHOULD_HAPPEN,
        "can_kill": chaos_can_kill_here(),
        "kill_not_from_here": KILL_NOT_FROM_HERE,
        "burst_requests": BURST_REQUESTS,
        "burst_pool": BURST_POOL,
        "visibility_timeout_s": visibility_timeout_s(),
        "is_staff": is_staff(request.user),
        "redelivery_explained": redelivery_what_should_happen(),
        **result,
    }
    run_id = str(context.get("run_id") or request.GET.get("run", ""))
    if run_id.isalnum() and result.get("redelivery", True):
        context["run_id"] = run_id
        context["attempts"] = redelivery_attempts(run_id=run_id)
        # Refresh once a second while an attempt runs, so redelivery is seen happen.
        context["running"] = any(a.finished is None for a in context["attempts"])
        context["refresh"] = context["running"] or not context["attempts"]
        killed = request.GET.get("killed", "")
        if killed.isdigit():
            context["done"] = gettext(
                "Sent SIGKILL to pid %(pid)s, the pool process running the task."
            ) % {"pid": killed}
            context["expect"] = redelivery_what_should_happen()
    return render(request, "storefront/chaos.html", context)


@require_GET
@chaos_required
def panel(request: HttpRequest) -> HttpResponse:
    try:
        return _panel(request)
    except RedeliveryUnavailable as error:
        return _unavailable(request, error)


@require_POST
@chaos_required
@staff_required
def fault_arm(request: HttpRequest) -> HttpResponse:
    if not chaos_takes_faults():
        return _panel(request, failed=gettext(NO_SCRIPTED_FAULTS))
    mode = request.POST.get("mode", "")
    if mode not in FAULT_MODE_BY_NAME:
        return _panel(
            request, failed=gettext("There is no fault mode called %(mode)r.") % {"mode": mode}
        )
    form = FaultForm(request.POST, mode=mode)
    if not form.is_valid():
        return _panel(request, bound=form)
    data = form.cleaned_data
    chaos_fault_arm(
        mode=data["mode"],
        count=data["count"],
        delay_s=data["delay_s"] or 0.0,
        copies=data["copies"] or 3,
    )
    fault = FAULT_MODE_BY_NAME[data["mode"]]
    return _panel(
        request,
        done=gettext("%(fault)s is on for the next %(count)s charge(s).")
        % {"fault": gettext(fault.label), "count": data["count"]},
        expect=fault.what_should_happen,
    )


@require_POST
@chaos_required
@staff_required
def fault_clear(request: HttpRequest) -> HttpResponse:
    if not chaos_takes_faults():
        return _panel(request, failed=gettext(NO_SCRIPTED_FAULTS))
    cleared = chaos_fault_clear()
    return _panel(
        request,
        done=gettext("All faults are off (%(cleared)s cleared).") % {"cleared": cleared},
        expect=gettext_noop("The provider behaves again."),
    )


@require_POST
@chaos_required
def repeat(request: HttpRequest) -> HttpResponse:
    try:
        result = chaos_repeat(user_id=user_id(request))
    except (ChaosUnavailable, ShopUnreachable) as error:
        return _panel(request, failed=str(error))
    return _panel(request, repeat=result, expect=REPEAT_WHAT_SHOULD_HAPPEN)


@require_POST
@chaos_required
def burst(request: HttpRequest) -> HttpResponse:
    try:
        result = chaos_burst(user_id=user_id(request))
    except (ChaosUnavailable, ShopUnreachable) as error:
        return _panel(request, failed=str(error))
    return _panel(request, burst=result, expect=BURST_WHAT_SHOULD_HAPPEN)


@require_POST
@chaos_required
@staff_required
def kill_worker(request: HttpRequest) -> HttpResponse:
    try:
        pid = chaos_kill_worker()
    except ChaosUnavailable as error:
        return _panel(request, failed=str(error))
    return _panel(
        request,
        done=gettext("Sent SIGKILL to the worker (pid %(pid)s) and its pool processes.")
        % {"pid": pid},
        expect=KILL_WHAT_SHOULD_HAPPEN,
    )


@require_POST
@chaos_required
@staff_required
def redelivery_start(request: HttpRequest) -> HttpResponse:
    try:
        run_id = chaos_redelivery_start()
    except RedeliveryUnavailable as error:
        return _unavailable(request, error)
    return redirect(f"{reverse('storefront:chaos')}?run={run_id}#redelivery-h")


@require_POST
@chaos_required
@staff_required
def redelivery_kill(request: HttpRequest, run_id: str) -> HttpResponse:
    try:
        pid = chaos_redelivery_kill(run_id=run_id)
    except RedeliveryUnavailable as error:
        return _unavailable(request, error)
    except ChaosUnavailable as error:
        return _panel(request, run_id=run_id, failed=str(error))
    # Redirected, so the panel's once-a-second refresh (a GET) can follow the run.
    return redirect(f"{reverse('storefront:chaos')}?run={run_id}&killed={pid}#redelivery-h")
