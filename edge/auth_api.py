"""POST /api/v1/auth/token/: DRF's token endpoint, throttled and reading JSON strictly.

DRF spells out this view's parsers, so the default (edge.strictjson) does not
apply to it: a deeply nested JSON body would reach the stock decoder. Login
attempts are throttled per address and per username before the password check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import parsers
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response

from edge.fields import StrictCharField
from edge.strictjson import StrictJSONParser
from edge.throttling import login_attempt_check


class TokenInputSerializer(AuthTokenSerializer):
    """DRF's credentials, documented as the strings they must be (no NUL)."""

    username = StrictCharField(label="Username", write_only=True)
    password = StrictCharField(
        label="Password", style={"input_type": "password"}, trim_whitespace=False, write_only=True
    )


class TokenObtainApi(ObtainAuthToken):
    serializer_class = TokenInputSerializer
    parser_classes = (parsers.FormParser, parsers.MultiPartParser, StrictJSONParser)
    # The body's username and password are the credentials: a token or a session sent
    # along is irrelevant here (and a stale one must not turn a login into a 401).
    authentication_classes = ()
    # Documented beside the framework's answers (edge.openapi.AutoSchema).
    framework_problems = {
        429: (
            "`login-throttled`: too many attempts from this address or for this username; "
            "retry after `Retry-After` seconds"
        )
    }

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        username = request.data.get("username", "") if isinstance(request.data, Mapping) else ""
        login_attempt_check(request, str(username))
        return super().post(request, *args, **kwargs)
