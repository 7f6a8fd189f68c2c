"""The provider's daily statement: its models, the import (download, match, settle),
the periodic jobs and the pass ``manage.py reconcile --once`` runs with them (passes.py),
staff resolving discrepancies (admin.py), and the day's report.
"""
