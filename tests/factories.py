"""factory-boy factories: the one place tests make rows."""

import uuid
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.authtoken.models import Token

from idempotency.core import fingerprint
from idempotency.models import IdempotencyKey
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


# Every action of the operator's desk (reconcile.desk.models.PERMISSIONS).
DESK_ACTIONS = ("retry", "refund", "accept", "dismiss", "approve")


def desk_operator(*actions: str, username: str | None = None) -> Any:
    """A staff user holding the desk's permission for each of ``actions`` (all by default)."""
    from django.contrib.auth.models import Permission

    user = UserFactory.create(is_staff=True, **({"username": username} if username else {}))
    codenames = [f"{action}_case" for action in actions or DESK_ACTIONS]
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="reconcile", codename__in=codenames)
    )
    return get_user_model().objects.get(pk=user.pk)  # a fresh object: no stale perm cache


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


def key_record_plant(
    user: Any,
    *,
    path: str,
    point: str,
    resource_type: str = "",
    resource_id: int | None = None,
    locked: bool = False,
) -> str:
    """The key record of a POST to ``path`` (empty body), as one left at ``point``; its key.

    ``locked``: the request still runs (its lock is fresh), so a same-key request
    gets 409; otherwise it died (lock released or expired) and a retry resumes.
    """
    key = str(uuid.uuid4())
    now = timezone.now()
    IdempotencyKey.objects.create(
        user=user,
        key=key,
        fingerprint=fingerprint(method="POST", path=path, body={}),
        method="POST",
        path=path,
        recovery_point=point,
        created_at=now,
        lock_token=uuid.uuid4() if locked else None,
        locked_at=now if locked else None,
        resource_type=resource_type,
        resource_id=resource_id,
    )
    return key


def pay_record_plant(
    user: Any, order: Any, *, point: str, payment: Any = None, locked: bool = False
) -> str:
    """The key record of a pay request, as one left at ``point`` leaves it (see above)."""
    return key_record_plant(
        user,
        path=f"/api/v1/orders/{order.number}/pay/",
        point=point,
        resource_type="payment" if payment else "",
        resource_id=payment.pk if payment else None,
        locked=locked,
    )
