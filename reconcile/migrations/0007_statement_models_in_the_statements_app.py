"""The statement's three models belong to the statements app (operations/statements/).

State only: their tables keep their names and their rows (``db_table`` on each
model); statements' 0001 declares the same models in its own state and moves
their content types, so permissions and admin history go with them.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reconcile", "0006_statement_line_kinds_and_money_after_the_fact"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="statementline", name="statement"),
                migrations.RemoveField(model_name="statementline", name="ledger_entry"),
                migrations.RemoveField(model_name="statementline", name="stray"),
                migrations.DeleteModel(name="StatementDiscrepancy"),
                migrations.DeleteModel(name="StatementImport"),
                migrations.DeleteModel(name="StatementLine"),
            ],
            database_operations=[],
        ),
    ]
