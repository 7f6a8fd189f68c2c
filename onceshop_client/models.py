"""The API's JSON shapes, as typed dictionaries (DESIGN.md 5)."""

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
    status: str  # PENDING, SUCCEEDED, FAILED, UNKNOWN
    amount: int
    currency: str
    trade_no: str | None


class Order(TypedDict):
    number: str
    status: str  # UNPAID, PAID, CANCELLED
    amount: int
    currency: str
    lines: list[OrderLine]
    payments: list[Payment]
    created_at: str
    paid_at: str | None
