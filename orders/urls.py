from django.urls import path

from orders.api import OrderCancelApi, OrderDetailApi, OrderListCreateApi, ProductListCreateApi

urlpatterns = [
    path("products/", ProductListCreateApi.as_view(), name="product-list"),
    path("orders/", OrderListCreateApi.as_view(), name="order-list"),
    path("orders/<str:number>/", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<str:number>/cancel/", OrderCancelApi.as_view(), name="order-cancel"),
]
