"""The API's JSON shapes, as typed dictionaries (docs/design.md, "Orders and payments")."""

from __future__ import annotations

from typing import TypedDict


class Line(TypedDict):
    sku: str
    quantity: int


class Product(TypedDict):
    sku: str
    name: str
    price: int  # minor units
    currency: str
    stock: int


class OrderLine(TypedDict):
    sku: str
    quantity: int
    unit_price: int


class Payment(TypedDict):
    out_trade_no: str
    status: str  # PENDING, SUCCEEDED, FAILED, UNKNOWN, ORPHANED
    amount: int
    currency: str
    trade_no: str | None


class Refund(TypedDict):
    refund_no: str  # the out_refund_no sent to the provider
    status: str  # PENDING, SUCCEEDED, FAILED, UNKNOWN
    amount: int
    reason: str
    refund_id: str | None


class Order(TypedDict):
    number: str
    status: str  # UNPAID, PAID, CANCELLED, REFUNDED
    amount: int
    currency: str
    lines: list[OrderLine]
    payments: list[Payment]
    refunded_amount: int
    refunds: list[Refund]
    created_at: str
    paid_at: str | None
