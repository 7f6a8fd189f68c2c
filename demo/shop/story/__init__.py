"""The guided story: the reading's founding scenario, replayed against the running shop.

    The customer clicks Pay; the page spins, so they click again. The gateway,
    whose first request timed out, retries it three seconds later. The
    provider's callback arrives (three times). The first charge had in fact
    succeeded. Three triggers, one order: one order, one debit, one shipment.

Then a second chapter: the provider declines a second order's charge, the
customer gives up and cancels, and the provider captures it after all; the
shop books that orphaned capture and refunds it automatically.

The parts, each small enough to read on its own:

- ``wire``: every request goes through the project's client, ``onceshop_client``,
  over HTTP against ``SHOP_BASE_URL`` (which follows ``PORT``).
- ``scene``: what the chapters share: the ``Scene`` they record ``Happening``s
  on (what was sent, what came back, when), placing an order, the faults.
- ``scenario``: the founding scenario, run like a real client with a fresh
  customer's token, the provider scripted through its faults API.
- ``observe``: reads what the background work did (the notification, who settled
  the payment, the shipment), then the books and the audit.
- ``late_success`` / ``late_observe``: the second chapter, and what became of
  the late capture, read from the rows.
- ``narrate``: tells all of it in time order, with who settled the payment.

``story_run`` returns a ``StoryReport``, so ``manage.py story``, the home page's
button and the tests share one implementation. One story runs at a time
(``one_at_a_time``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from demo.shop.story.late_observe import late_observe
from demo.shop.story.late_success import late_success_run
from demo.shop.story.narrate import story_narrate
from demo.shop.story.observe import story_books, story_observe
from demo.shop.story.one_at_a_time import ABOUT_S, STORY_LOCK, one_at_a_time
from demo.shop.story.report import StoryReport, StoryRunning, StoryStep, StoryUnavailable, TallyRow
from demo.shop.story.scenario import BACKGROUND_WAIT_S, GATEWAY_DELAY_S, scenario_run
from demo.shop.story.scene import Scene, story_faults_path, story_runnable

__all__ = [
    "ABOUT_S",
    "BACKGROUND_WAIT_S",
    "GATEWAY_DELAY_S",
    "STORY_LOCK",
    "StoryReport",
    "StoryRunning",
    "StoryStep",
    "StoryUnavailable",
    "TallyRow",
    "story_run",
    "story_runnable",
]


@one_at_a_time
def story_run(
    *,
    base_url: str | None = None,
    provider_url: str | None = None,
    operator: str = "staff",
    gateway_delay_s: float = GATEWAY_DELAY_S,
    wait_s: float = BACKGROUND_WAIT_S,
    progress: Callable[[str], None] = lambda _part: None,
) -> StoryReport:
    """Replay the founding scenario on a fresh customer; raise StoryUnavailable if it cannot.

    Both URLs default to the settings, which follow ``PORT`` like the demo does.
    ``progress`` is told each part as it starts (the command prints them: the story
    takes seconds, and a silent terminal reads as a hung one). Raises StoryRunning,
    having done nothing, while another story runs.
    """
    scene = Scene(
        base_url=(base_url or settings.SHOP_BASE_URL).rstrip("/"),
        provider_url=(provider_url or settings.PROVIDER_BASE_URL).rstrip("/"),
        faults_path=story_faults_path(),
        operator=operator,
        gateway_delay_s=gateway_delay_s,
        wait_s=wait_s,
    )
    progress("chapter 1: Pay clicked twice, a gateway retry, the callback three times")
    scenario_run(scene)
    progress("waiting for the background work: the notification, the shipment")
    observed = story_observe(scene)
    progress("chapter 2: a declined charge, the customer gives up, a late capture")
    late = late_success_run(scene)
    progress("reading the books and running the audit")
    story_books(scene, observed, later=late_observe(scene, late), charges=2)
    return StoryReport(
        customer=scene.customer,
        order_number=scene.order_number,
        steps=story_narrate(scene.happenings, observed),
        settled_by=observed.settled_by,
        tally=observed.tally,
        audit=observed.audit,
        audit_note=observed.audit_note,
    )
