"""Periodic work of the notification inbox (thin: each task calls one service)."""

from celery import shared_task

from callbacks.services import callback_unmatched_strip


@shared_task
def strip_unmatched_notification_bodies() -> int:
    return callback_unmatched_strip()
