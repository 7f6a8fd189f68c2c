"""The Celery app (``config.celery:app``): broker settings come from Django's settings."""

import math
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("onceshop")
app.config_from_object("django.conf:settings", namespace="CELERY")


def _task_packages() -> list[str]:
    from django.conf import settings

    # A plugin's app may keep its tasks to some processes (settings.TASKLESS_APPS: the
    # demo's sandbox, outside SANDBOX_ENABLED): a worker refuses, as unregistered, any
    # message naming them.
    return [name for name in settings.INSTALLED_APPS if name not in settings.TASKLESS_APPS]


app.autodiscover_tasks(_task_packages)


def whole_seconds(countdown: float) -> int:
    """A task's countdown as every broker can hold it: whole seconds, rounded up.

    On RabbitMQ's quorum queues Celery delays a task by the broker's native delayed
    delivery, which counts whole seconds: it refuses a countdown between 0 and 1
    ("countdown must be a positive number", so the task is never sent) and
    truncates any other. Rounded up, a delayed task is sent, and never early.
    """
    return math.ceil(countdown) if countdown > 0 else 0


# Request ids through the queue, task metrics, Celery's logging: see the module.
import observability.celery  # noqa: E402, F401
