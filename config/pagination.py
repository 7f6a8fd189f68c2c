"""Page-number pagination with a client-chosen ``page_size`` (capped)."""

from rest_framework import pagination


class PageNumberPagination(pagination.PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 100
