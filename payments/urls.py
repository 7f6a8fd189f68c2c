from django.urls import path

from payments.api import OrderCancelApi, OrderPayApi, OrderRefundApi

urlpatterns = [
    path("orders/<str:number>/pay/", OrderPayApi.as_view(), name="order-pay"),
    path("orders/<str:number>/cancel/", OrderCancelApi.as_view(), name="order-cancel"),
    path("orders/<str:number>/refunds/", OrderRefundApi.as_view(), name="order-refund"),
]
