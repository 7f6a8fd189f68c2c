"""Schema-only serializers shared by the OpenAPI description of every app."""

from rest_framework import serializers


class ProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details, as every error of the API is shaped."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    code = serializers.CharField(help_text="Stable machine-readable slug; switch on this.")
