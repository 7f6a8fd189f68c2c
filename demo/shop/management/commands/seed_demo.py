"""Seed a small catalogue, a staff user and two demo customers (idempotent).

Demo mode only: the passwords are printed here and on the login page, so a shop
in production refuses to create these accounts at all.
"""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from orders.models import Product
from orders.services import product_create

CATALOGUE = [
    ("TEA-LONGJING", "Longjing green tea, 250 g", 12800, 50),
    ("MUG-CELADON", "Celadon mug", 5900, 20),
    ("PEN-BRUSH", "Calligraphy brush", 2500, 100),
    ("BOOK-DDIA", "Designing Data-Intensive Applications", 9900, 5),
]
DEMO_USERS = [
    ("alice", "alice-pays-once", False),
    ("bob", "bob-pays-once", False),
    ("staff", "staff-runs-the-shop", True),
]


class Command(BaseCommand):
    help = "Seed the demo catalogue and users; print their API tokens."

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEMO_MODE:
            raise CommandError(
                "seed_demo runs only in demo mode (DEMO_MODE=true): it creates accounts "
                "whose passwords are public."
            )
        for sku, name, price, stock in CATALOGUE:
            if not Product.objects.filter(sku=sku).exists():
                product_create(sku=sku, name=name, price=price, currency="CNY", stock=stock)
        user_model = get_user_model()
        for username, password, staff in DEMO_USERS:
            user, created = user_model.objects.get_or_create(
                username=username, defaults={"is_staff": staff, "is_superuser": staff}
            )
            if created:
                user.set_password(password)
                user.save()
            token, _ = Token.objects.get_or_create(user=user)
            self.stdout.write(f"{username:6} password={password:20} token={token.key}")
