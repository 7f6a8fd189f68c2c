"""Merchant authentication of the sandbox API: ``Authorization: Bearer <key>``.

The sandbox is another company: it does not know the shop's users, tokens or
sessions, only the merchant keys it issued (``SANDBOX_API_KEYS``).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from demo.sandbox.errors import MerchantUnauthorized

SCHEME = "Bearer"


@dataclass(frozen=True)
class Merchant:
    """The authenticated caller (``request.user`` on merchant endpoints)."""

    key_index: int  # which of SANDBOX_API_KEYS it presented; never the key itself
    is_authenticated: bool = True


class MerchantKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != SCHEME.lower() or not presented.strip():
            return None
        given = presented.strip().encode()
        # Every key compared, in constant time: neither the answer's timing nor an
        # early exit tells a guesser which key, or how much of it, was right.
        found = [
            index
            for index, known in enumerate(settings.SANDBOX_API_KEYS)
            if hmac.compare_digest(given, known.encode())
        ]
        if not found:
            return None
        merchant = Merchant(key_index=found[0])
        return merchant, merchant

    def authenticate_header(self, request: Request) -> str:
        return f'{SCHEME} realm="sandbox"'


class IsMerchant(BasePermission):
    """Only a known merchant key; anything else is 401 ``merchant-unauthorized``.

    Raised here rather than returning False, because DRF would then answer with
    its generic ``not-authenticated`` code, and the sandbox has its own contract.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.user, Merchant):
            raise MerchantUnauthorized()
        return True
