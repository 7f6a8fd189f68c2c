"""The provider's daily statement: its models, the import (download, match, settle),
the periodic jobs, staff resolving discrepancies, and the day's report.
"""
