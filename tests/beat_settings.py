"""The profile of a test's ``celery beat`` (tests/beats.py): the tests' own, with beat's
schedule cut down to the jobs the test names and ticking at the test's pace.

The entries are the product's (config/settings/background.py: the same task names and
options); only how often they are due changes, so a test sees many ticks in seconds.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import CELERY_BEAT_SCHEDULE as PRODUCT_SCHEDULE

# TEST_BEAT_JOBS: the schedule's entry names, comma-separated; TEST_BEAT_EVERY_S: the pace.
_JOBS = os.environ["TEST_BEAT_JOBS"].split(",")
_EVERY_S = float(os.environ["TEST_BEAT_EVERY_S"])
# A tick is not dropped (expired) however long it waits for the worker on a loaded
# machine: every tick sent is one the test can count as run or turned away.
_EXPIRES_S = 60.0

CELERY_BEAT_SCHEDULE = {
    name: {**PRODUCT_SCHEDULE[name], "schedule": _EVERY_S, "options": {"expires": _EXPIRES_S}}
    for name in _JOBS
}
