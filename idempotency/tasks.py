"""Periodic work of the idempotency layer (thin: each task calls one service)."""

from celery import shared_task

from idempotency.services import idempotency_key_reap


@shared_task
def reap_idempotency_keys() -> int:
    return idempotency_key_reap().deleted
