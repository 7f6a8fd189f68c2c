from django.urls import path

from orders.api import OrderDetailApi, OrderListCreateApi, ProductListCreateApi

urlpatterns = [
    path("products/", ProductListCreateApi.as_view(), name="product-list"),
    path("orders/", OrderListCreateApi.as_view(), name="order-list"),
    path("orders/<str:number>/", OrderDetailApi.as_view(), name="order-detail"),
]
