from django.db import migrations, models
from django.db.models import Q

# The job an item-failed case was opened by: its summary begins with the job's name.
_BACKFILL = """
    UPDATE reconcile_case SET job = split_part(summary, ':', 1)
    WHERE kind = 'item-failed' AND job = ''
"""


class Migration(migrations.Migration):
    dependencies = [
        ("reconcile", "0003_operators_desk"),
    ]

    operations = [
        migrations.AddField(
            model_name="case",
            name="job",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.RunSQL(_BACKFILL, reverse_sql=migrations.RunSQL.noop),
        migrations.RemoveConstraint(
            model_name="case",
            name="case_one_open_per_subject",
        ),
        migrations.AddConstraint(
            model_name="case",
            constraint=models.UniqueConstraint(
                condition=Q(("state", "open")),
                fields=("subject_type", "subject_id", "job"),
                name="case_one_open_per_subject_and_job",
            ),
        ),
    ]
