"""The statement's models in their app (operations/statements/migrations/0001_initial.py):
the tables the reconcile app created keep their names and their rows, the content
types (and so the permissions) follow the models, and the migrations match the models.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import date

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from operations.statements.models import (
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)

# Where the reconcile app holds the statement's models itself.
IN_RECONCILE = ("reconcile", "0006_statement_line_kinds_and_money_after_the_fact")
MODELS = ("statementimport", "statementline", "statementdiscrepancy")
TABLES = {"reconcile_statementimport", "reconcile_statementline", "reconcile_statementdiscrepancy"}


def migrate_to(target: tuple[str, str]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor


def content_types(app_label: str) -> dict[str, int]:
    found = ContentType.objects.filter(app_label=app_label, model__in=MODELS)
    return dict(found.values_list("model", "pk"))


@pytest.fixture
def forward_after() -> Iterator[None]:
    """Whatever the test does, the database ends on the latest migrations."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_rows_and_content_types_follow_the_models_into_their_app(forward_after):
    ContentType.objects.get_for_models(StatementImport, StatementLine, StatementDiscrepancy)
    ContentType.objects.clear_cache()
    ids = content_types("statements")
    assert set(ids) == set(MODELS)
    permission = Permission.objects.get(codename="change_statementdiscrepancy")
    # Given the statement's models in reconcile, with rows in their tables
    state = migrate_to(IN_RECONCILE).loader.project_state(IN_RECONCILE).apps
    assert content_types("reconcile") == ids  # backwards, the same rows, relabelled
    assert content_types("statements") == {}
    OldImport = state.get_model("reconcile", "StatementImport")
    OldLine = state.get_model("reconcile", "StatementLine")
    OldDiscrepancy = state.get_model("reconcile", "StatementDiscrepancy")
    day = date(2026, 1, 2)
    statement = OldImport.objects.create(provider="sandbox", day=day, downloads=1, lines=1)
    line = OldLine.objects.create(
        statement=statement,
        provider="sandbox",
        kind="charge",
        line_no=1,
        provider_id="ch_migrated",
        reference="ref-migrated",
        amount=1999,
        currency="CNY",
        status="succeeded",
        settled_at=timezone.now(),
        outcome="discrepancy",
    )
    discrepancy = OldDiscrepancy.objects.create(
        kind="not-booked", day=day, line=line, reason="planted before the move"
    )

    # When the migrations run forward
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    # Then the same tables hold the same rows, read through the statements app
    models = (StatementImport, StatementLine, StatementDiscrepancy)
    assert {model._meta.db_table for model in models} == TABLES
    assert StatementImport.objects.get(pk=statement.pk).day == day
    moved = StatementLine.objects.get(pk=line.pk)
    assert (moved.provider_id, moved.amount, moved.outcome) == ("ch_migrated", 1999, "discrepancy")
    assert moved.outcome == LineOutcome.DISCREPANCY
    found = StatementDiscrepancy.objects.select_related("line__statement").get(pk=discrepancy.pk)
    assert found.line is not None
    assert found.line.statement.pk == statement.pk
    assert found.reason == "planted before the move"
    # and the content types are the same rows, under the statements label
    assert content_types("statements") == ids
    assert content_types("reconcile") == {}
    assert ContentType.objects.get_for_model(StatementDiscrepancy).pk == ids["statementdiscrepancy"]
    assert Permission.objects.get(pk=permission.pk).content_type_id == ids["statementdiscrepancy"]


@pytest.mark.django_db
def test_the_migrations_match_the_models():
    out = io.StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # exits 1 on a change

    assert out.getvalue().strip() == "No changes detected"


@pytest.mark.django_db
def test_the_tables_keep_their_names():
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))

    assert tables >= TABLES
    assert not {name for name in tables if name.startswith("statements_")}
