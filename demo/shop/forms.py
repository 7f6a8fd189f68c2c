"""The pages' forms: what a person may type, checked before anything is attempted.

A form error is the behaviour matrix's "body fails validation before the
action starts": shown next to its field, nothing stored, the checkout token
not consumed (the corrected form can still be submitted once).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import RegexValidator
from django.utils.translation import gettext, gettext_lazy

from demo.sandbox.models import Fault
from demo.shop.services import CHECKOUT_TOKEN_BYTES
from orders.models import Product
from orders.services import LineRequest

# secrets.token_urlsafe(n) is base64url without padding: ceil(4n/3) characters.
_TOKEN_LENGTH = -(-CHECKOUT_TOKEN_BYTES * 4 // 3)
TOKEN_FORMAT = RegexValidator(
    rf"^[A-Za-z0-9_-]{{{_TOKEN_LENGTH}}}$",
    message=gettext_lazy("This form's checkout token was altered or is missing."),
)


class CheckoutForm(forms.Form):
    """One quantity per product of the catalogue, and the form's one-time token."""

    checkout_token = forms.CharField(widget=forms.HiddenInput, validators=[TOKEN_FORMAT])

    def __init__(self, *args: Any, products: Iterable[Product], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.products = list(products)
        for product in self.products:
            self.fields[self.field_name(product)] = forms.IntegerField(
                label=gettext("Quantity of %(product)s") % {"product": product.name},
                min_value=0,
                max_value=settings.ORDER_MAX_QUANTITY,
                required=False,
                initial=0,
                widget=forms.NumberInput(attrs={"inputmode": "numeric", "class": "qty"}),
            )

    @staticmethod
    def field_name(product: Product) -> str:
        return f"qty-{product.sku}"

    def quantity_fields(self) -> list[tuple[Product, forms.BoundField]]:
        return [(product, self[self.field_name(product)]) for product in self.products]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        chosen = [p for p in self.products if cleaned.get(self.field_name(p))]
        if not chosen and not any(self.field_name(p) in self.errors for p in self.products):
            raise forms.ValidationError(gettext("Choose at least one item: a quantity above 0."))
        if len(chosen) > settings.ORDER_MAX_LINES:
            raise forms.ValidationError(
                gettext("One order holds at most %(count)s different products.")
                % {"count": settings.ORDER_MAX_LINES}
            )
        return cleaned

    def lines(self) -> list[LineRequest]:
        """The order's lines in catalogue order (a stable body: a stable fingerprint)."""
        return [
            LineRequest(sku=product.sku, quantity=self.cleaned_data[self.field_name(product)])
            for product in self.products
            if self.cleaned_data.get(self.field_name(product))
        ]


class PayForm(forms.Form):
    """The pay button: only the key of this pay intent (its format checked by the service).

    Valid here means the key can be looked up at all (no NUL, not longer than the
    column): the page asks what the key will resume before the service runs.
    """

    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=255)


class FaultForm(forms.Form):
    """Switch on one of the provider's fault modes (the sandbox's own limits)."""

    mode = forms.ChoiceField(choices=Fault.Mode.choices, widget=forms.HiddenInput)
    count = forms.IntegerField(
        label=gettext_lazy("For how many charges"), min_value=1, max_value=100, initial=1
    )
    delay_s = forms.FloatField(
        label=gettext_lazy("Answer after (seconds)"), min_value=0, max_value=60, required=False
    )
    copies = forms.IntegerField(
        label=gettext_lazy("Copies"), min_value=1, max_value=10, required=False
    )

    def __init__(self, *args: Any, mode: str, **kwargs: Any) -> None:
        # One form per mode on one page: ids carry the mode, so labels stay unique.
        kwargs.setdefault("auto_id", f"id_{mode}_%s")
        kwargs.setdefault("initial", {})
        kwargs["initial"] = {
            "mode": mode,
            # Longer than the shop waits for the provider: the answer really is late.
            "delay_s": float(settings.PROVIDER_TIMEOUT_S) + 2.0,
            "copies": 3,
            **kwargs["initial"],
        }
        super().__init__(*args, **kwargs)


class CaseActForm(forms.Form):
    """One click on a desk case (/books/): the action and its reason, checked before any
    lookup (a NUL or an over-long note is refused here, never by PostgreSQL)."""

    action = forms.CharField(max_length=16)
    note = forms.CharField(max_length=500)
