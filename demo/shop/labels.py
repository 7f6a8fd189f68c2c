"""What a stored enum value means, in words a page can show (and translate).

The values are the database's (``duplicate``); a reader needs their meaning: a
notification recorded as ``duplicate`` is one that found its payment already
settled the same way — usually by the pay request's own answer, before the
notification arrived — not a second copy of anything.
"""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

from callbacks.models import ProviderNotification

_Outcome = ProviderNotification.Outcome

NOTIFICATION_OUTCOMES: dict[str, str] = {
    _Outcome.APPLIED: gettext_noop("applied: it settled the payment"),
    _Outcome.DUPLICATE: gettext_noop("the payment was already settled the same way"),
    _Outcome.REJECTED: gettext_noop("rejected: amount or currency disagree, not applied"),
    _Outcome.UNMATCHED: gettext_noop("unmatched: no attempt of ours, left for reconciliation"),
    _Outcome.DEFERRED: gettext_noop("deferred: it would move a state backwards"),
    _Outcome.IGNORED: gettext_noop("ignored: a kind the shop does not apply"),
}


def notification_outcome(outcome: str) -> str:
    """``duplicate`` -> "the payment was already settled the same way", translated."""
    label = NOTIFICATION_OUTCOMES.get(outcome)
    return gettext(label) if label else outcome
