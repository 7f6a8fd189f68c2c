"""Logging in and out of the pages (session auth)."""

import pytest
from django.test import Client

from demo.shop.management.commands.seed_demo import DEMO_USERS
from tests.factories import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db


def test_the_login_page_lists_the_demo_accounts_only_in_demo_mode(settings):
    settings.DEMO_MODE = False
    hidden = Client().get("/login/").content.decode()
    settings.DEMO_MODE = True
    shown = Client().get("/login/").content.decode()

    for username, password, _staff in DEMO_USERS:
        assert password not in hidden
        assert username in shown
        assert password in shown


def test_logging_in_lands_on_the_shop_as_that_user(user):
    client = Client()

    response = client.post(
        "/login/", {"username": user.username, "password": DEFAULT_PASSWORD}, follow=True
    )

    assert response.redirect_chain[-1][0] == "/"
    assert f"Logged in as <strong>{user.username}</strong>" in response.content.decode()


def test_a_wrong_password_is_said_in_words_next_to_the_form(user):
    response = Client().post("/login/", {"username": user.username, "password": "nope"})

    page = response.content.decode()
    assert response.status_code == 200
    assert 'role="alert" id="login-errors"' in page
    assert "enter a correct username and password" in page.lower()
    assert 'aria-describedby="login-errors"' in page


def test_a_page_that_needs_a_login_sends_you_there_and_says_why():
    response = Client().get("/orders/", follow=True)

    assert response.redirect_chain[-1][0] == "/login/?next=/orders/"
    assert "your session has ended" in response.content.decode()


def test_logging_out_takes_a_post_with_csrf(web):
    assert web.get("/logout/").status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = web.cookies
    assert strict.post("/logout/").status_code == 403

    response = web.post("/logout/", follow=True)

    assert "Log in" in response.content.decode()
    assert web.get("/orders/").status_code == 302
