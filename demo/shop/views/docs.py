"""How it works: the behaviour matrix and the order state machine, read from the code."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from demo.shop.concepts import CONCEPTS, audit_checks
from demo.shop.diagram import order_state_machine
from demo.shop.matrix import behaviour_matrix


@require_GET
def how_it_works(request: HttpRequest) -> HttpResponse:
    context = {
        "matrix": behaviour_matrix(),
        "machine": order_state_machine(),
        "concepts": CONCEPTS,
        "audit_checks": audit_checks(),
    }
    return render(request, "storefront/how.html", context)
