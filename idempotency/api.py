"""GET /api/v1/idempotency-keys/{key}/: what became of my key?"""

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from edge.api import current_user_id
from idempotency.models import IdempotencyKey
from idempotency.selectors import idempotency_key_get


class IdempotencyKeyDetailApi(APIView):
    @extend_schema_serializer(component_name="IdempotencyKeyStatus")
    class OutputSerializer(serializers.Serializer):
        key = serializers.CharField()
        status = serializers.SerializerMethodField()
        recovery_point = serializers.CharField()
        response_status = serializers.IntegerField(allow_null=True)
        created_at = serializers.DateTimeField()
        expires_at = serializers.DateTimeField(allow_null=True)

        def get_status(self, record: IdempotencyKey) -> str:
            return "finished" if record.is_finished else "in_progress"

    @extend_schema(responses=OutputSerializer, summary="What became of an Idempotency-Key")
    def get(self, request: Request, key: str) -> Response:
        record = idempotency_key_get(user_id=current_user_id(request), key=key)
        return Response(self.OutputSerializer(record).data)
