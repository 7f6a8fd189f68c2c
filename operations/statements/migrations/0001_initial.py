"""The provider's statement, in the statements app: its three models, on the tables
the reconcile app created (``db_table``), rows and all.

State only: reconcile's 0007 takes the models out of its state, this migration
puts them in this app's, and no table is created, renamed or copied. Their
content types follow (app label ``reconcile`` to ``statements``), so the
permissions and the admin's history that name them follow too; backwards, they
go back.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("statementimport", "statementline", "statementdiscrepancy")


def content_types_relabel(from_label, to_label):
    """Move the models' content types from one app label to the other (a label that
    already holds a model's content type keeps it, and the other row is left as is)."""

    def relabel(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        rows = ContentType.objects.using(schema_editor.connection.alias)
        for model in MODELS:
            if not rows.filter(app_label=to_label, model=model).exists():
                rows.filter(app_label=from_label, model=model).update(app_label=to_label)

    return relabel


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("payments", "0007_refund_reversals_and_disputes"),
        ("reconcile", "0007_statement_models_in_the_statements_app"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="StatementImport",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("provider", models.CharField(default="sandbox", max_length=32)),
                        ("day", models.DateField()),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("covered_until", models.DateTimeField(blank=True, null=True)),
                        ("downloads", models.PositiveIntegerField(default=0)),
                        ("lines", models.PositiveIntegerField(default=0)),
                        ("matched_at", models.DateTimeField(blank=True, null=True)),
                        ("error", models.TextField(blank=True, default="")),
                    ],
                    options={
                        "db_table": "reconcile_statementimport",
                        "ordering": ["-day", "provider"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("provider", "day"),
                                name="statement_one_import_per_provider_day",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="StatementLine",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("provider", models.CharField(default="sandbox", max_length=32)),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("charge", "Charge"),
                                    ("refund", "Refund"),
                                    ("refund_failure", "Refund Failure"),
                                    ("dispute_withdrawal", "Dispute Withdrawal"),
                                    ("dispute_reinstatement", "Dispute Reinstatement"),
                                    ("other", "Other"),
                                ],
                                max_length=24,
                            ),
                        ),
                        ("line_no", models.PositiveIntegerField()),
                        ("provider_id", models.CharField(max_length=64)),
                        ("reference", models.CharField(max_length=64)),
                        ("amount", models.PositiveBigIntegerField()),
                        ("currency", models.CharField(max_length=3)),
                        ("status", models.CharField(max_length=16)),
                        ("settled_at", models.DateTimeField()),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("matched", "Matched"),
                                    ("stray", "Stray"),
                                    ("discrepancy", "Discrepancy"),
                                    ("not_ours", "Not Ours"),
                                ],
                                default="pending",
                                max_length=16,
                            ),
                        ),
                        ("note", models.TextField(blank=True, default="")),
                        ("matched_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "ledger_entry",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="payments.ledgerentry",
                            ),
                        ),
                        (
                            "statement",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="statements.statementimport",
                            ),
                        ),
                        (
                            "stray",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="reconcile.straycapture",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "reconcile_statementline",
                        "ordering": ["statement", "id"],
                    },
                ),
                migrations.CreateModel(
                    name="StatementDiscrepancy",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("amount-differs", "Amount Differs"),
                                    ("not-on-statement", "Not On Statement"),
                                    ("unknown-refund", "Unknown Refund"),
                                    ("unknown-dispute", "Unknown Dispute"),
                                    ("not-booked", "Not Booked"),
                                ],
                                max_length=24,
                            ),
                        ),
                        ("day", models.DateField()),
                        ("reason", models.TextField()),
                        ("opened_at", models.DateTimeField(auto_now_add=True)),
                        ("resolved_at", models.DateTimeField(blank=True, null=True)),
                        ("resolution", models.TextField(blank=True, default="")),
                        (
                            "ledger_entry",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="payments.ledgerentry",
                            ),
                        ),
                        (
                            "resolved_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "line",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="statements.statementline",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "statement discrepancies",
                        "db_table": "reconcile_statementdiscrepancy",
                        "ordering": ["-opened_at", "-id"],
                    },
                ),
                migrations.AddIndex(
                    model_name="statementline",
                    index=models.Index(
                        condition=models.Q(("outcome", "pending")),
                        fields=["statement", "id"],
                        name="statement_line_pending_idx",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="statementline",
                    constraint=models.UniqueConstraint(
                        fields=("provider", "kind", "provider_id"), name="statement_line_once"
                    ),
                ),
                migrations.AddIndex(
                    model_name="statementdiscrepancy",
                    index=models.Index(
                        condition=models.Q(("resolved_at__isnull", True)),
                        fields=["opened_at"],
                        name="discrepancy_open_idx",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="statementdiscrepancy",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("line__isnull", False)),
                        fields=("kind", "line"),
                        name="discrepancy_once_per_line",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="statementdiscrepancy",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("line__isnull", True)),
                        fields=("kind", "ledger_entry"),
                        name="discrepancy_once_per_ledger_entry",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="statementdiscrepancy",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("line__isnull", False),
                            ("ledger_entry__isnull", False),
                            _connector="OR",
                        ),
                        name="discrepancy_names_a_line_or_entry",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="statementdiscrepancy",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("resolution", ""), ("resolved_at__isnull", True)),
                            models.Q(
                                ("resolved_at__isnull", False),
                                models.Q(("resolution", ""), _negated=True),
                            ),
                            _connector="OR",
                        ),
                        name="discrepancy_resolution_has_a_note",
                    ),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_relabel("reconcile", "statements"),
            content_types_relabel("statements", "reconcile"),
        ),
    ]
