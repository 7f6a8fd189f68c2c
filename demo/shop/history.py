"""What an order page's requests got, kept server-side so a reload still shows it.

Most of these answers are stored nowhere else: a 409 (the key was in use) and a
503 (outcome unknown) are deliberately not kept on the key's record. The page
keeps them per order in Redis, appended with RPUSH: two clicks answered at the
same moment both land (a session, saved whole at the end of each request, would
keep only the last writer's). Kept as long as a key's answer replays.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from demo.shop.answers import Answer, status_phrase
from demo.shop.selectors import Event
from edge.redis import REDIS_DOWN, redis_client
from observability.metrics.instruments import observe_redis_unavailable

logger = logging.getLogger(__name__)

# The newest answers of an order that are kept: a page, not an archive.
MAX_ANSWERS = 50


@dataclass(frozen=True)
class AnswerEntry:
    label: str  # "Checkout", "Click 2", "Click 1 (retry 1, same key)"
    at: str  # ISO time the answer was sent back
    status: int
    code: str
    freshness: str  # replayed | fresh | not stored
    why: str
    key: str  # the Idempotency-Key, shortened
    note: str = ""  # what the request did besides answering (the retry's query)

    @property
    def when(self) -> datetime:
        return datetime.fromisoformat(self.at)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def replayed(self) -> bool:
        return self.freshness == "replayed"

    @property
    def stored(self) -> bool:
        return self.freshness != "not stored"

    @property
    def retry_same_key(self) -> bool:
        return not self.stored and self.status in (409, 503)


def _name(*, user_id: int, number: str) -> str:
    return f"order-answers:{user_id}:{number}"


def answer_record(
    *, user_id: int, number: str, label: str, answer: Answer, key: str, note: str = ""
) -> AnswerEntry:
    entry = AnswerEntry(
        label=label,
        at=timezone.now().isoformat(),
        status=answer.status,
        code=answer.code,
        freshness=answer.freshness,
        why=answer.why,
        key=key if len(key) <= 12 else f"{key[:10]}…",
        note=note,
    )
    name = _name(user_id=user_id, number=number)
    try:
        with redis_client().pipeline() as pipe:  # MULTI: appended, trimmed, expiring
            pipe.rpush(name, json.dumps(asdict(entry)))
            pipe.ltrim(name, -MAX_ANSWERS, -1)
            pipe.expire(name, settings.IDEMPOTENCY_KEY_TTL)
            pipe.execute()
    except REDIS_DOWN as error:
        # The answer is shown; only its memory for a later reload is lost.
        observe_redis_unavailable(use="answer-history")
        logger.warning("answer not kept for the page: redis %s", type(error).__name__)
    return entry


def answer_history(*, user_id: int, number: str) -> list[AnswerEntry]:
    try:
        raw = redis_client().lrange(_name(user_id=user_id, number=number), 0, -1)
    except REDIS_DOWN as error:
        observe_redis_unavailable(use="answer-history")
        logger.warning("answer history not read: redis %s", type(error).__name__)
        return []
    return [AnswerEntry(**json.loads(item)) for item in raw]


_FRESHNESS_DETAIL = {
    "replayed": gettext_noop("the stored answer, replayed: nothing ran again"),
    "fresh": gettext_noop("ran now; this answer is stored for the key"),
    "not stored": gettext_noop("nothing was stored for the key; the same key may be retried"),
}


def answer_events(entries: list[AnswerEntry]) -> list[Event]:
    """The answers as timeline events: the 409s, the 503s and the retries' queries too."""
    events = []
    for entry in entries:
        what = entry.code or status_phrase(entry.status)
        detail = entry.note or gettext(_FRESHNESS_DETAIL[entry.freshness])
        if entry.status == 503 and entry.code == "payment-outcome-unknown":
            detail = gettext(
                "outcome unknown: the key stays at 'payment_created' with no answer stored; "
                "the same key, or the reconciler, asks the provider"
            )
        events.append(
            Event(
                entry.when,
                "answer" if entry.stored else "unknown",
                gettext("%(label)s: answered %(status)s %(what)s (%(freshness)s)")
                % {
                    "label": entry.label,
                    "status": entry.status,
                    "what": what,
                    "freshness": gettext(entry.freshness),
                },
                detail,
            )
        )
    return events
