"""Page-number pagination with a client-chosen ``page_size`` (1-100).

DRF falls back to the default size when ``page_size`` is not a positive integer,
so ``?page_size=abc`` answers 200 as if it had not been sent. The schema says
"integer from 1 to 100", and a client that sends anything else has a bug worth
hearing about: 400 ``validation-error``.
"""

from typing import Any

from rest_framework import pagination
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request


class PageNumberPagination(pagination.PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= self.max_page_size):
            raise ValidationError(
                {self.page_size_query_param: [f"An integer from 1 to {self.max_page_size}."]}
            )
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] |= {"minimum": 1, "maximum": self.max_page_size}
            if parameter["name"] == self.page_query_param:
                parameter["schema"] |= {"minimum": 1}
        return parameters
