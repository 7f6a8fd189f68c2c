from django.urls import path

from payments.api import OrderPayApi

urlpatterns = [
    path("orders/<str:number>/pay/", OrderPayApi.as_view(), name="order-pay"),
]
