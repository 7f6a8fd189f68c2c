"""Small helpers every app's API module shares."""

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from edge.pagination import PageNumberPagination


def current_user_id(request: Request) -> int:
    """The authenticated caller's id (the views using it require authentication)."""
    user_id = request.user.pk
    assert isinstance(user_id, int), "view must require an authenticated user"
    return user_id


def paginated_response(
    request: Request,
    view: APIView,
    queryset: Any,
    serializer: type[serializers.BaseSerializer[Any]],
) -> Response:
    # The view's own class when it names one (drf-spectacular reads it to document
    # the page), else the project's.
    paginator = getattr(view, "pagination_class", PageNumberPagination)()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True).data)
