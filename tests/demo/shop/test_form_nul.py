"""A NUL in any field of any page's form is answered with a page or a 4xx, never a 500.

PostgreSQL cannot hold a NUL in text, so a value looked up before it is validated
fails in SQL (a ``DataError``). The forms are not listed by hand: every page of
the shop's URL conf is rendered (to a visitor and to a logged-in staff user), the
forms found in them are posted with a NUL in one field at a time, and every
form class of demo/shop/forms.py must have been met on some page. A new page,
a new form or a new field is tested without touching this file.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern

from demo.shop import forms as page_forms
from demo.shop import urls as page_urls
from orders.models import Order
from reconcile.desk.models import CaseKind
from reconcile.desk.services import case_open
from tests.conftest import new_key

NUL = "a\x00b"
# Values for the URL conf's path parameters, by name (a new one fails below).
PATH_VALUES = {"number": "{number}", "run_id": "run1", "case_id": "{case}"}
FIELD_TAGS = {"input", "select", "textarea", "button"}
PAY_SCRIPT = Path(settings.BASE_DIR) / "demo" / "shop" / "static" / "storefront" / "pay.js"


class FormsFound(HTMLParser):
    """Every POST form of a page: (action, {field: value}, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self._open: tuple[str, dict[str, str], dict[str, str]] | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "form" and found.get("method", "get").lower() == "post":
            self._open = (found.get("action", ""), {}, found)
            self.forms.append(self._open)
        elif self._open is not None and tag in FIELD_TAGS and (name := found.get("name")):
            self._open[1].setdefault(name, found.get("value", ""))
            self._select = name if tag == "select" else None
        elif (
            self._open is not None
            and tag == "option"
            and self._select is not None
            and not self._open[1][self._select]
        ):
            # A select sends its first option unless another is chosen.
            self._open[1][self._select] = found.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None


def route(pattern: URLPattern, number: str, case: str = "0") -> str:
    path = str(pattern.pattern)
    for name in pattern.pattern.converters:
        assert name in PATH_VALUES, f"no test value for the path parameter {name!r}"
        value = PATH_VALUES[name].format(number=number, case=case)
        path = path.replace(f"<str:{name}>", value).replace(f"<int:{name}>", value)
    return "/" + path


def forms_of_every_page(
    clients: list[Client], numbers: list[str], case: str = "0"
) -> dict[tuple[str, ...], Any]:
    found: dict[tuple[str, ...], Any] = {}
    for pattern in page_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        paths = {route(pattern, number, case) for number in numbers}
        for path, client in [(path, client) for path in sorted(paths) for client in clients]:
            response = client.get(path)
            if response.status_code != 200 or "html" not in response["Content-Type"]:
                continue
            parser = FormsFound()
            parser.feed(response.content.decode())
            for action, fields, attributes in parser.forms:
                if "data-pay" in attributes:  # the pay script posts more than the form
                    fields |= dict.fromkeys(
                        re.findall(r'body\.set\("(\w+)"', PAY_SCRIPT.read_text()), "1"
                    )
                fields.pop("csrfmiddlewaretoken", None)
                found[(action, *sorted(fields))] = (action, fields, client)
    return found


@pytest.fixture
def staff_user(user: User) -> User:
    user.is_staff = True
    user.save()
    return user


@pytest.mark.django_db
def test_a_nul_in_any_field_of_any_page_form_is_never_a_500(
    staff_user, paid_order: Order, create_order
):
    # Given: the staff user's orders in each state a page shows forms for, and an open
    # case on the desk (its action form is on /books/ for staff).
    unpaid = create_order(key=new_key()).json()["number"]
    case = case_open(
        kind=CaseKind.ITEM_FAILED,
        subject_type="payment",
        subject_id=1,
        reference="P-nul",
        summary="a case for its form",
    )
    staff = Client(raise_request_exception=False)
    staff.force_login(staff_user)
    visitor = Client(raise_request_exception=False)
    forms = forms_of_every_page([visitor, staff], [unpaid, paid_order.number], str(case))
    names = {name for _, fields, _ in forms.values() for name in fields}
    for form_class in vars(page_forms).values():
        if getattr(form_class, "__module__", "") == page_forms.__name__ and hasattr(
            form_class, "base_fields"
        ):
            assert set(form_class.base_fields) <= names, f"{form_class.__name__} on no page"

    answers = {}
    for action, fields, client in forms.values():
        for name in fields:
            response = client.post(action, {**fields, name: NUL})
            answers[f"{action} {name}"] = response.status_code

    # The login, language, checkout, pay, refund and fault forms, at least.
    assert {"/login/ username", "/checkout/ checkout_token", "/chaos/faults/ count"} <= set(answers)
    assert {f"/books/cases/{case}/ note", f"/books/cases/{case}/ action"} <= set(answers)
    assert {
        f"/orders/{unpaid}/pay/ idempotency_key",
        f"/orders/{paid_order.number}/refund/ amount",
    } <= set(answers)
    assert {where: status for where, status in answers.items() if status >= 500} == {}


@pytest.mark.django_db
def test_a_nul_in_any_path_parameter_of_any_page_is_never_a_500(staff_user):
    staff = Client(raise_request_exception=False)
    staff.force_login(staff_user)
    answers = {}
    for pattern in page_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        if pattern.pattern.converters:
            path = route(pattern, "%00", "%00").replace("run1", "%00")
            answers[path] = (staff.get(path).status_code, staff.post(path).status_code)

    assert answers
    assert {path: got for path, got in answers.items() if max(got) >= 500} == {}
