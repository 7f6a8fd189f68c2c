"""Tell what happened, in time order, in the light of who settled the payment.

Each happening keeps the sentence its chapter wrote; the pay requests and the
notification are told here, because what they mean depends on what the others
did: a retry that found the payment settled by the notification did not settle
it itself, and the story must not say it did.
"""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

from demo.shop.story.observe import Observed, Settler
from demo.shop.story.report import StoryStep
from demo.shop.story.scene import Happening, Role

# Who does what in the story (the actor of every happening), marked for translation.
ACTORS = (
    gettext_noop("customer"),
    gettext_noop("shop"),
    gettext_noop("gateway"),
    gettext_noop("provider"),
    gettext_noop("operator"),
    gettext_noop("reconciler"),
)
# Marked here, told in the reader's language by _why.
CLICK = gettext_noop(
    "The page made one key for this pay intent. The shop takes the key, commits the "
    "payment attempt (recovery point 'payment_created') and asks the provider, outside "
    "any transaction."
)
DOUBLE_CLICK = gettext_noop(
    "The page kept the key, so the second click is the same request, not a new one."
)
STILL_OPEN = gettext_noop("The key's record stays at 'payment_created' with no answer stored.")
NOTIFIED = gettext_noop(
    "Its notify_id is unique in the shop's table: every copy after the first finds that "
    "row and gets the same answer back."
)
SETTLED_ONCE = gettext_noop(
    "Once: settling is a conditional UPDATE of an unsettled payment, so whoever comes "
    "after changes nothing."
)

RETRY_BY_SETTLER = {
    Settler.NOTIFICATION: gettext_noop(
        "It resumed at 'payment_created' and found the payment already settled by the "
        "notification: nothing was charged again."
    ),
    Settler.RETRY_QUERY: gettext_noop(
        "It resumed at 'payment_created' and, before charging, asked the provider about "
        "the attempt (query by out_trade_no): the first charge had succeeded, so it settled "
        "the payment with it. Nothing was charged again."
    ),
}


def _when_notified(happening: Happening, others: dict[Role, Happening]) -> str:
    answered = others.get(Role.CLICK_ANSWER)
    if answered is not None and happening.at_s < answered.at_s:
        return gettext("while the first click was still waiting on the provider")
    return gettext("before anyone asked the provider again")


def _why(happening: Happening, observed: Observed, others: dict[Role, Happening]) -> str:
    answer = happening.answer
    match happening.role:
        case Role.CLICK:
            return gettext(CLICK)
        case Role.DOUBLE_CLICK:
            return gettext(DOUBLE_CLICK)
        case Role.CLICK_ANSWER if answer is not None and answer.status == 503:
            return gettext(STILL_OPEN)
        case Role.GATEWAY_RETRY if answer is not None and answer.ok and not answer.replayed:
            told = RETRY_BY_SETTLER.get(observed.settler)
            return gettext(told) if told else ""
        case Role.NOTIFICATION if observed.notification_applied:
            when = _when_notified(happening, others)
            settled = gettext("It settled the payment %(when)s.") % {"when": when}
            return f"{settled} {gettext(NOTIFIED)}"
        case Role.NOTIFICATION if observed.notified_at_s is not None:
            unchanged = gettext("The payment was settled already, so it changed nothing.")
            return f"{unchanged} {gettext(NOTIFIED)}"
        case Role.NOTIFICATION:
            return gettext(
                "Nothing arrived in time: is the worker running? The payment does not wait for it."
            )
        case Role.SETTLED:
            return gettext(SETTLED_ONCE)
    return happening.why


def story_narrate(happenings: list[Happening], observed: Observed) -> list[StoryStep]:
    """Every happening as a step, oldest first (a stable sort keeps same-time order)."""
    others = {happening.role: happening for happening in happenings}
    return [
        StoryStep(
            actor=gettext(happening.actor),  # "customer", "shop", ...: marked in scenario
            action=happening.action,
            request=happening.request,
            answer=happening.answer,
            result=happening.result,
            why=_why(happening, observed, others),
            at_s=happening.at_s,
        )
        for happening in sorted(happenings, key=lambda h: h.at_s)
    ]
