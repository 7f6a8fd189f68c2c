"""Fixtures of the notification endpoint's tests."""

import pytest

from payments.models import Payment
from payments.services import payment_create
from tests.conftest import new_key


@pytest.fixture
def payment(create_order, user) -> Payment:
    """A PENDING attempt for a new order: what a notification settles."""
    number = create_order(key=new_key()).json()["number"]
    return payment_create(user_id=user.pk, order_number=number)
