"""POST /api/v1/auth/token/: DRF's token exchange, throttled before the password check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response

from config.throttling import login_attempt_check


class TokenObtainApi(ObtainAuthToken):
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        username = request.data.get("username", "") if isinstance(request.data, Mapping) else ""
        login_attempt_check(request, str(username))
        return super().post(request, *args, **kwargs)
