"""``manage.py cases``: the open cases, one a line; ``cases resolve ID --note TEXT`` dismisses one.

$ python manage.py cases
7  unknown-notification  P-FORGED-1  3h12m
$ python manage.py cases resolve 7 --note "forged with the demo's public secret"
case 7 dismissed
$ python manage.py cases resolve 7 --note "again"
case 7 is already resolved          (exit 0: the case is where it was asked to be)
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from reconcile.desk.actions import CaseActionRefused, case_act
from reconcile.desk.models import Case, CaseActionKind
from reconcile.desk.selectors import case_age_s, cases_open


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
        "Print the open cases of the operator's desk (id, kind, reference, age), or "
        "dismiss one: cases resolve ID --note TEXT."
    )

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="verb")
        resolve = sub.add_parser("resolve", help="dismiss a case, with a reason")
        resolve.add_argument("case_id", type=int)
        resolve.add_argument("--note", required=True, help="why (kept with who and when)")
        resolve.add_argument("--by", default="", help="who (default: the OS user)")

    def handle(self, *args: Any, verb: str | None = None, **options: Any) -> None:
        if verb == "resolve":
            self._resolve(options["case_id"], note=options["note"], by=options["by"])
            return
        now = timezone.now()
        for case in cases_open():
            age = age_text(case_age_s(case, now=now))
            self.stdout.write(f"{case.pk}\t{case.kind}\t{case.reference or '-'}\t{age}")

    def _resolve(self, case_id: int, *, note: str, by: str) -> None:
        try:
            result = case_act(
                case_id=case_id,
                action=CaseActionKind.DISMISS,
                note=note,
                by_name=by or f"{getpass.getuser()} (manage.py cases)",
            )
        except Case.DoesNotExist:
            raise CommandError(f"no case {case_id}") from None
        except CaseActionRefused as refused:
            raise CommandError(f"case {case_id}: {refused}") from None
        self.stdout.write(result.message)
