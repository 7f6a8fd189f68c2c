"""The OpenAPI description: errors as served, and the answers the framework gives.

A client generator trusts the schema literally, so it must say what the
server really does: every error is ``application/problem+json`` (never
``application/json``), and the answers that come from the framework rather
than from a view (401 for a bad token, 403, 404 for an unknown reference or
page, 405, 406, 411, 413, 414, 415, 429, 431, and the 400s of the strict JSON parser)
are documented on every operation where they can occur. ``AutoSchema`` derives
them from the view itself (its authentication, permissions, throttles, path
parameters and parsers), so a new endpoint is documented right without a line.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular import openapi
from drf_spectacular.utils import OpenApiResponse
from rest_framework import permissions, serializers
from rest_framework.authentication import SessionAuthentication

from edge.errors import PROBLEM_CONTENT_TYPE


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details, as every error of the API is shaped."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    code = serializers.CharField(help_text="Stable machine-readable slug; switch on this.")


_BODY_METHODS = {"POST", "PUT", "PATCH"}
_OPEN_PERMISSIONS = (permissions.AllowAny, permissions.IsAuthenticated)


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's schema, with problem+json errors and the framework's answers."""

    def _get_response_for_code(
        self,
        serializer: Any,
        status_code: str,
        media_types: Any = None,
        direction: Any = "response",
    ) -> Any:
        if (int(status_code) >= 400 or _is_problem(serializer)) and not media_types:
            # Errors, and the one problem that is not an error (a pay's 202).
            media_types = [PROBLEM_CONTENT_TYPE]
        return super()._get_response_for_code(serializer, status_code, media_types, direction)

    def _get_response_bodies(self, direction: Any = "response") -> Any:
        responses = super()._get_response_bodies(direction)
        for status, description in self._framework_errors().items():
            if str(status) not in responses:
                answer = OpenApiResponse(ProblemSerializer, description=description)
                responses[str(status)] = self._get_response_for_code(
                    answer, str(status), direction=direction
                )
        return dict(sorted(responses.items()))

    def _framework_errors(self) -> dict[int, str]:
        view, errors = self.view, {}
        # A request head past the shop's limits (edge/http_limits.py), on any operation.
        errors[414] = "`uri-too-long`: the path and query are longer than the shop reads"
        errors[431] = "`header-fields-too-large`: a header field too long, or too many"
        if self.method in _BODY_METHODS:
            errors[411] = "`length-required`: send the body with a Content-Length"
            errors[413] = "`payload-too-large`"
            if view.get_parsers():
                errors[400] = (
                    "`malformed-json`, `json-too-deep`, `json-number-not-finite` or "
                    "`validation-error`: fix the request"
                )
                errors[415] = "`unsupported-media-type`"
        if view.get_authenticators():
            errors[401] = "`not-authenticated`: missing, unknown or malformed credentials"
        staff_only = any(not isinstance(p, _OPEN_PERMISSIONS) for p in view.get_permissions())
        csrf = self.method in _BODY_METHODS and any(
            isinstance(a, SessionAuthentication) for a in view.get_authenticators()
        )
        if staff_only or csrf:
            errors[403] = (
                "`permission-denied`: not allowed for this user (or a session without CSRF)"
            )
        if "{" in self.path or self._is_list_view():
            errors[404] = "`not-found`: no such resource (or page) for this user"
        if self._is_list_view():
            errors[400] = "`validation-error`: `page_size` is not an integer from 1 to 100"
        errors[405] = "`method-not-allowed`: the path exists, not with this method"
        errors[406] = "`not-acceptable`: the server only answers JSON"
        if view.get_throttles():
            errors[429] = "`throttled`: retry after `Retry-After` seconds"
        # Answers a view gives before its own work, which the view cannot show in its
        # declared responses (a throttle that is not a DRF throttle, say).
        errors.update(getattr(view, "framework_problems", {}))
        return errors


# --- Links: how a client (or Schemathesis' stateful run) goes from one answer to the
# next request. drf-spectacular has no decorator for them; this hook adds them.

_ORDER_NUMBER = {"number": "$response.body#/number"}
_ORDER_LINKS = {
    "GetOrder": {"operationId": "api_v1_orders_retrieve", "parameters": _ORDER_NUMBER},
    "PayOrder": {"operationId": "api_v1_orders_pay_create", "parameters": _ORDER_NUMBER},
    "CancelOrder": {"operationId": "api_v1_orders_cancel_create", "parameters": _ORDER_NUMBER},
    "RefundOrder": {"operationId": "api_v1_orders_refunds_create", "parameters": _ORDER_NUMBER},
    "GetIdempotencyKey": {
        "operationId": "api_v1_idempotency_keys_retrieve",
        "parameters": {"key": "$request.header.Idempotency-Key"},
    },
}
# (operationId, status) -> the links of that answer
LINKS = {
    ("api_v1_orders_create", "201"): _ORDER_LINKS,
    ("api_v1_orders_pay_create", "200"): _ORDER_LINKS,
    ("api_v1_orders_cancel_create", "200"): _ORDER_LINKS,
    ("api_v1_orders_refunds_create", "200"): _ORDER_LINKS,
}


def add_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    """drf-spectacular postprocessing hook: attach ``LINKS`` to their responses."""
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            for status, response in operation.get("responses", {}).items():
                if links := LINKS.get((operation.get("operationId"), status)):
                    response["links"] = links
    return result


def _is_problem(answer: Any) -> bool:
    shape = answer.response if isinstance(answer, OpenApiResponse) else answer
    shape = type(shape) if isinstance(shape, serializers.Serializer) else shape
    return isinstance(shape, type) and issubclass(shape, ProblemSerializer)
