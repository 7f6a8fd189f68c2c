"""The operator's desk: what the shop cannot settle by itself, held for a person.

- ``models.py``: ``Case`` (one open case per subject, a permission per action),
  ``CaseAction`` (who did what, and why), ``CaseApproval`` (a refund or accept
  waiting for a second person) and ``ItemFailure`` (the failure count of a batch item);
- ``isolation.py``: failure isolation, which every batch job runs its items through;
- ``services.py``: opening cases (and the beat job that opens the due ones);
- ``actions.py``: the actions a person takes on a case (``money.py``: refund and
  accept; ``approvals.py``: the second person above ``DESK_APPROVAL_ABOVE``);
- ``selectors.py``: what is open, and what the audit holds for a person.
"""
