"""Tell what happened, in time order, in the light of who settled the payment.

Each happening keeps the sentence its chapter wrote; the pay requests and the
notification are told here, because what they mean depends on what the others
did: a retry that found the payment settled by the notification did not settle
it itself, and the story must not say it did.
"""

from __future__ import annotations

from storefront.story.observe import Observed, Settler
from storefront.story.report import StoryStep
from storefront.story.scenario import Happening, Role

CLICK = (
    "The page made one key for this pay intent. The shop takes the key, commits the "
    "payment attempt (recovery point 'payment_created') and asks the provider, outside "
    "any transaction."
)
DOUBLE_CLICK = "The page kept the key, so the second click is the same request, not a new one."
STILL_OPEN = "The key's record stays at 'payment_created' with no answer stored."
NOTIFIED = (
    " Its notify_id is unique in the shop's table: every copy after the first finds that "
    "row and gets the same answer back."
)
SETTLED_ONCE = (
    "Once: settling is a conditional UPDATE of an unsettled payment, so whoever comes "
    "after changes nothing."
)

RETRY_BY_SETTLER = {
    Settler.NOTIFICATION: (
        "It resumed at 'payment_created' and found the payment already settled by the "
        "notification: nothing was charged again."
    ),
    Settler.RETRY_QUERY: (
        "It resumed at 'payment_created' and, before charging, asked the provider about "
        "the attempt (query by out_trade_no): the first charge had succeeded, so it settled "
        "the payment with it. Nothing was charged again."
    ),
}


def _when_notified(happening: Happening, others: dict[Role, Happening]) -> str:
    answered = others.get(Role.CLICK_ANSWER)
    if answered is not None and happening.at_s < answered.at_s:
        return "while the first click was still waiting on the provider"
    return "before anyone asked the provider again"


def _why(happening: Happening, observed: Observed, others: dict[Role, Happening]) -> str:
    answer = happening.answer
    match happening.role:
        case Role.CLICK:
            return CLICK
        case Role.DOUBLE_CLICK:
            return DOUBLE_CLICK
        case Role.CLICK_ANSWER if answer is not None and answer.status == 503:
            return STILL_OPEN
        case Role.GATEWAY_RETRY if answer is not None and answer.ok and not answer.replayed:
            return RETRY_BY_SETTLER.get(observed.settler, "")
        case Role.NOTIFICATION if happening.result.startswith("applied"):
            return f"It settled the payment {_when_notified(happening, others)}." + NOTIFIED
        case Role.NOTIFICATION if happening.result != "not received yet":
            return "The payment was settled already, so it changed nothing." + NOTIFIED
        case Role.NOTIFICATION:
            return (
                "Nothing arrived in time: is the worker running? The payment does not wait for it."
            )
        case Role.SETTLED:
            return SETTLED_ONCE
    return happening.why


def story_narrate(happenings: list[Happening], observed: Observed) -> list[StoryStep]:
    """Every happening as a step, oldest first (a stable sort keeps same-time order)."""
    others = {happening.role: happening for happening in happenings}
    return [
        StoryStep(
            actor=happening.actor,
            action=happening.action,
            request=happening.request,
            answer=happening.answer,
            result=happening.result,
            why=_why(happening, observed, others),
            at_s=happening.at_s,
        )
        for happening in sorted(happenings, key=lambda h: h.at_s)
    ]
