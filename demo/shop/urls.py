"""The demo shop's pages, mounted at the site root after the API, admin and sandbox."""

from django.contrib.auth.views import LogoutView
from django.urls import path

from demo.shop.views import auth, books, chaos, docs, orders, shop, story
from edge.throttling import login_throttled

app_name = "storefront"

urlpatterns = [
    path("", shop.home, name="home"),
    path("stock/live/", shop.stock_live, name="stock-live"),
    path("checkout/", shop.checkout, name="checkout"),
    path("login/", login_throttled(auth.ShopLoginView.as_view()), name="login"),
    # POST only (Django 5): a link or an image tag cannot log anyone out.
    path("logout/", LogoutView.as_view(next_page="storefront:home"), name="logout"),
    path("orders/", orders.order_list, name="orders"),
    path("orders/<str:number>/", orders.order_detail, name="order"),
    path("orders/<str:number>/pay/", orders.order_pay, name="order-pay"),
    path("orders/<str:number>/refund/", orders.order_refund, name="order-refund"),
    path("chaos/", chaos.panel, name="chaos"),
    path("chaos/faults/", chaos.fault_arm, name="chaos-fault-arm"),
    path("chaos/faults/clear/", chaos.fault_clear, name="chaos-fault-clear"),
    path("chaos/repeat/", chaos.repeat, name="chaos-repeat"),
    path("chaos/burst/", chaos.burst, name="chaos-burst"),
    path("chaos/kill-worker/", chaos.kill_worker, name="chaos-kill-worker"),
    path("chaos/redelivery/", chaos.redelivery_start, name="chaos-redelivery"),
    path(
        "chaos/redelivery/<str:run_id>/kill/",
        chaos.redelivery_kill,
        name="chaos-redelivery-kill",
    ),
    path("books/", books.page, name="books"),
    path("books/live/", books.live, name="books-live"),
    path("books/cases/<int:case_id>/", books.case_act_view, name="case-act"),
    path("how-it-works/", docs.how_it_works, name="how"),
    path("story/", story.run, name="story"),
]
