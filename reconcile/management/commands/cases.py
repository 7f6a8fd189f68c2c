"""``manage.py cases``: the open cases, one a line; ``cases resolve ID --note TEXT`` dismisses one;
``cases refund ID --note TEXT`` and ``cases accept ID --note TEXT`` take those actions (where
they fit the case), ``cases approve ID --note TEXT`` approves another person's refund or accept,
through the same service as the admin and /books/. ``--by`` names the shop's user who acts
(default: the login name running the command); one the shop does not know is refused.

$ python manage.py cases
7  unknown-notification  P-FORGED-1  3h12m
$ python manage.py cases resolve 7 --note "forged with the demo's public secret"
case 7 dismissed
$ python manage.py cases resolve 7 --note "again"
case 7 is already resolved          (exit 0: the case is where it was asked to be)
$ python manage.py cases accept 9 --note "the provider's statement is right" --by alice
case 9: accept of 1999 is awaiting a second person's approval
$ python manage.py cases approve 9 --note "checked the statement too" --by bob
case 9: the provider's word on P-...: captured, rolled_forward
"""

from __future__ import annotations

import getpass
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from reconcile.desk.actions import CaseActionRefused, case_act
from reconcile.desk.models import Case, CaseActionKind
from reconcile.desk.selectors import case_age_s, cases_open

# The verbs besides listing: ``resolve`` dismisses; the others are the action they name.
VERBS = {
    "resolve": "dismiss a case, with a reason",
    CaseActionKind.REFUND.value: "refund the capture of a case about one the shop never made",
    CaseActionKind.ACCEPT.value: "settle from the provider's confirmed answer",
    CaseActionKind.APPROVE.value: "approve another person's refund or accept",
}
ACTION_OF = {"resolve": CaseActionKind.DISMISS.value}


def age_text(seconds: float) -> str:
    """3d4h, 3h12m, 12m5s, 9s: the two largest units."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


class Command(BaseCommand):
    help = (
        "Print the open cases of the operator's desk (id, kind, reference, age), or act "
        "on one: cases resolve|refund|accept ID --note TEXT."
    )

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="verb")
        for verb, help_text in VERBS.items():
            act = sub.add_parser(verb, help=help_text)
            act.add_argument("case_id", type=int)
            act.add_argument("--note", required=True, help="why (kept with who and when)")
            act.add_argument(
                "--by", default="", help="the shop's user who acts (default: the login name)"
            )

    def handle(self, *args: Any, verb: str | None = None, **options: Any) -> None:
        if verb in VERBS:
            self._act(
                options["case_id"],
                action=ACTION_OF.get(verb, verb),
                note=options["note"],
                by=options["by"],
            )
            return
        now = timezone.now()
        for case in cases_open():
            age = age_text(case_age_s(case, now=now))
            self.stdout.write(f"{case.pk}\t{case.kind}\t{case.reference or '-'}\t{age}")

    def _act(self, case_id: int, *, action: str, note: str, by: str) -> None:
        username = by or getpass.getuser()
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(
                f"no active user {username!r}: --by names a user of the shop who holds the "
                "action's permission"
            )
        try:
            result = case_act(case_id=case_id, action=action, note=note, user=user)
        except Case.DoesNotExist:
            raise CommandError(f"no case {case_id}") from None
        except CaseActionRefused as refused:
            raise CommandError(f"case {case_id}: {refused}") from None
        self.stdout.write(result.message)
