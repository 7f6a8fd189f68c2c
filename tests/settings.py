"""The test harness's profile: the demo's, with the sandbox served in-process.

The tests need the sandbox provider on the live server (``/sandbox/``) and sign
notifications with the development secret, neither of which the production
profile allows. Set here, before ``config.settings`` reads the environment, and
in ``os.environ`` so that every process a test starts (Celery workers, crash
children, ``make demo``) runs in the same profile. The production profile has
its own tests (tests/production/), which start processes without these.
"""

import os

os.environ["DEMO_MODE"] = "true"
os.environ["SANDBOX_ENABLED"] = "true"

from config.settings import *  # noqa: F403
