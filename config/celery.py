"""The Celery app (``config.celery:app``): broker settings come from Django's settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("onceshop")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
