"""factory-boy factories: the one place tests make rows."""

from typing import Any

import factory
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from orders.models import Product
from orders.services import product_create

DEFAULT_PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", DEFAULT_PASSWORD)

    @factory.post_generation
    def token(user: Any, create: bool, extracted: Any, **kwargs: Any) -> None:
        if create:
            user.save()
            Token.objects.create(user=user)


class ProductFactory(factory.Factory):
    """Products go through the service, so their stock is recorded as received."""

    class Meta:
        model = Product

    sku = factory.Sequence(lambda n: f"SKU-{n:04d}")
    name = factory.Faker("word")
    price = 1999
    currency = "CNY"
    stock = 100

    @classmethod
    def _create(cls, model_class: type[Product], *args: Any, **kwargs: Any) -> Product:
        return product_create(**kwargs)

    @classmethod
    def _build(cls, model_class: type[Product], *args: Any, **kwargs: Any) -> Product:
        return model_class(**kwargs)
