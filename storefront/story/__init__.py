"""The guided story: the reading's founding scenario, replayed against the running shop.

    The customer clicks Pay; the page spins, so they click again. The gateway,
    whose first request timed out, retries it three seconds later. The
    provider's callback arrives (three times). The first charge had in fact
    succeeded. Three triggers, one order: one order, one debit, one shipment.

Three parts, each small enough to read on its own:

- ``scenario``: runs it like a real client, over HTTP against ``SHOP_BASE_URL``
  with a fresh customer's token, the provider scripted through its faults API.
  It is a list of chapters; each records what it sent and what came back, when.
- ``observe``: reads what the background work did (the notification, who settled
  the payment, the shipment), then the books and the audit.
- ``narrate``: tells all of it in time order, with who settled the payment.

``story_run`` returns a ``StoryReport``, so ``manage.py story``, the home page's
button and the tests share one implementation.
"""

from __future__ import annotations

from django.conf import settings

from storefront.client import ShopUnreachable
from storefront.story.narrate import story_narrate
from storefront.story.observe import story_observe
from storefront.story.report import StoryReport, StoryStep, StoryUnavailable, TallyRow
from storefront.story.scenario import BACKGROUND_WAIT_S, GATEWAY_DELAY_S, Scene, scenario_run

__all__ = [
    "BACKGROUND_WAIT_S",
    "GATEWAY_DELAY_S",
    "StoryReport",
    "StoryStep",
    "StoryUnavailable",
    "TallyRow",
    "story_run",
]


def story_run(
    *,
    base_url: str | None = None,
    provider_url: str | None = None,
    operator: str = "staff",
    gateway_delay_s: float = GATEWAY_DELAY_S,
    wait_s: float = BACKGROUND_WAIT_S,
) -> StoryReport:
    """Replay the founding scenario on a fresh customer; raise StoryUnavailable if it cannot.

    Both URLs default to the settings, which follow ``PORT`` like the demo does.
    """
    scene = Scene(
        base_url=(base_url or settings.SHOP_BASE_URL).rstrip("/"),
        provider_url=(provider_url or settings.PROVIDER_BASE_URL).rstrip("/"),
        operator=operator,
        gateway_delay_s=gateway_delay_s,
        wait_s=wait_s,
    )
    try:
        scenario_run(scene)
    except ShopUnreachable as error:
        raise StoryUnavailable(str(error)) from error
    observed = story_observe(scene)
    return StoryReport(
        customer=scene.customer,
        order_number=scene.order_number,
        steps=story_narrate(scene.happenings, observed),
        settled_by=observed.settled_by,
        tally=observed.tally,
        audit=observed.audit,
        audit_note=observed.audit_note,
    )
