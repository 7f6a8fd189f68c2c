"""POST /api/v1/callbacks/sandbox/: the provider's notifications come in here."""

import hashlib
import logging

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from callbacks.errors import CallbackMalformed, SignatureInvalid
from callbacks.services import callback_ingest
from config.errors import PROBLEM_CONTENT_TYPE
from config.openapi import ProblemSerializer
from config.throttling import CallbackRateThrottle
from payments.providers import (
    NotificationMalformed,
    NotificationSignatureInvalid,
    get_provider,
)

logger = logging.getLogger(__name__)


class SandboxCallbackApi(APIView):
    # The signature is the authentication: no user, no session, no CSRF. Throttled per
    # source address only, generously: the provider retries until it gets a 2xx, so a
    # 429 (with Retry-After) delays money, and stops a flood before any work is done.
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [CallbackRateThrottle]
    # No parsers: the signature covers the raw bytes, and nothing reads the body
    # before the signature checks out.
    parser_classes = []

    @extend_schema(
        request=None,
        summary="Provider notification (signed)",
        responses={
            200: OpenApiResponse(description="Received (applied, or already applied)"),
            400: OpenApiResponse(
                ProblemSerializer, description="`signature-invalid` or `callback-malformed`"
            ),
            413: OpenApiResponse(ProblemSerializer, description="`payload-too-large`"),
            422: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`callback-mismatch` or `callback-unknown-payment`: recorded, not applied, "
                    "the same answer on every redelivery"
                ),
            ),
        },
    )
    def post(self, request: Request) -> Response:
        raw_body = request.body
        try:
            notification = get_provider().verify_notification(
                headers=request.headers, raw_body=raw_body
            )
        except (NotificationSignatureInvalid, NotificationMalformed) as error:
            # Logged for forensics: who, how much, what was wrong. Never the
            # signature or the secret.
            logger.warning(
                "notification refused: %s (from %s, %d bytes, sha256 %s)",
                error,
                request.META.get("REMOTE_ADDR"),
                len(raw_body),
                hashlib.sha256(raw_body).hexdigest()[:16],
            )
            if isinstance(error, NotificationSignatureInvalid):
                raise SignatureInvalid() from error
            raise CallbackMalformed(reason=str(error)) from error
        answer = callback_ingest(notification=notification, raw_body=raw_body)
        response = Response(answer.body, status=answer.status)
        if answer.status >= 400:
            response.content_type = PROBLEM_CONTENT_TYPE
        return response
