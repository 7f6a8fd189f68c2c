"""Every spelling of a username that logs in shares that username's login budget.

Django's login form strips the username and normalises it to NFKC (its
``UsernameField``), so ``bob`` in fullwidth or mathematical letters, a ligature
(U+FB01) for ``fi`` or a decomposed ``é`` all log in as the account spelled the
plain way. The per-username throttle must count them as that account, or each
spelling is a fresh budget of guesses. The spellings are generated from the
Unicode database (every code point whose NFKC form is a piece of the name, and
every whitespace character around it); each door's test first shows which of
them log in there, then that every one of those is throttled.
"""

from __future__ import annotations

import functools
import unicodedata
import uuid
from collections import defaultdict
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from edge import throttling
from tests.abuse.test_logins import new_address, page_login, token_login
from tests.factories import DEFAULT_PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

# Letters, a ligature's pair (fi), a composed letter (é), a digit and every
# punctuation mark Django's username validator allows (. + @ _ -).
NAME = "fi.josé+2@x_-"
LIMIT = 3


def nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


FULLWIDTH = fullwidth(NAME)


@functools.cache
def preimages() -> dict[str, list[str]]:
    """NFKC form (up to 3 characters) -> every other code point with that form."""
    found: dict[str, list[str]] = defaultdict(list)
    for point in range(0x110000):
        if 0xD800 <= point <= 0xDFFF:
            continue  # lone surrogates: no request can carry one
        char = chr(point)
        form = nfkc(char)
        if form != char and len(form) <= 3:
            found[form].append(char)
    return found


def spellings(name: str, suffix: str) -> list[str]:
    """Other spellings of ``name + suffix`` (its stripped NFKC form), varying ``name``."""
    found: set[str] = set()
    for start in range(len(name)):
        for size in (1, 2, 3):
            for char in preimages().get(name[start : start + size], []):
                found.add(name[:start] + char + name[start + size :])
    found.add(unicodedata.normalize("NFD", name))
    found.add(fullwidth(name))
    found = {spelling + suffix for spelling in found}
    found |= {
        padded
        for point in range(0x110000)
        if not 0xD800 <= point <= 0xDFFF and chr(point).isspace()
        for padded in (chr(point) + name + suffix, name + suffix + chr(point))
    }
    return sorted(s for s in found if nfkc(s.strip()) == name + suffix != s)


@pytest.fixture
def account(settings: Any) -> User:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.LOGIN_RATE_PER_ADDRESS = ""
    # A name no earlier run used: the per-username counters outlive the database.
    return UserFactory.create(username=NAME + uuid.uuid4().hex[:8])


def logged_in(login: Any, response: Any) -> bool:
    if login is page_login:
        return response.status_code == 302
    return response.status_code == 200 and "token" in response.json()


def assert_every_spelling_that_logs_in_is_throttled(
    login: Any, account: User, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    suffix = account.username[len(NAME) :]
    candidates = spellings(NAME, suffix)
    now = throttling.clock()
    monkeypatch.setattr(throttling, "clock", lambda: now)
    # Given: which spellings log in at this door, with no limit in the way.
    settings.LOGIN_RATE_PER_USERNAME = ""
    logging_in = [
        spelling
        for spelling in candidates
        if logged_in(login, login(Client(), spelling, DEFAULT_PASSWORD, new_address()))
    ]
    # When: the plain name spends its budget, in a window of its own.
    settings.LOGIN_RATE_PER_USERNAME = f"{LIMIT}/min"
    monkeypatch.setattr(throttling, "clock", lambda: now + 120)
    for _ in range(LIMIT):
        login(Client(), account.username, "wrong-guess", new_address())

    # Then: every spelling that logs in is refused, the right password included.
    answers = {
        spelling: login(Client(), spelling, DEFAULT_PASSWORD, new_address()).status_code
        for spelling in logging_in
    }
    fresh = {ascii(spelling): status for spelling, status in answers.items() if status != 429}
    assert not fresh, f"{len(fresh)} of {len(answers)} spellings had a budget of their own: {fresh}"
    return logging_in


def test_every_spelling_that_logs_in_on_the_login_page_is_throttled(account, settings, monkeypatch):
    logging_in = assert_every_spelling_that_logs_in_is_throttled(
        page_login, account, settings, monkeypatch
    )

    suffix = account.username[len(NAME) :]
    assert FULLWIDTH + suffix in logging_in  # fullwidth
    assert "\U0001d41f" + NAME[1:] + suffix in logging_in  # mathematical bold
    assert "\ufb01" + NAME[2:] + suffix in logging_in  # a ligature for two letters
    assert unicodedata.normalize("NFD", NAME) + suffix in logging_in
    assert "\u3000" + account.username in logging_in  # an ideographic space around it
    assert len(logging_in) > 150


def test_every_spelling_that_logs_in_at_the_token_endpoint_is_throttled(
    account, settings, monkeypatch
):
    logging_in = assert_every_spelling_that_logs_in_is_throttled(
        token_login, account, settings, monkeypatch
    )

    # The serializer strips the name: every whitespace character around it logs in.
    assert " " + account.username in logging_in
    assert account.username + "\u3000" in logging_in
