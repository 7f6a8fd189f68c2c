"""Run Django code in a separate process against the test database (crash tests)."""

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def child_database_url() -> str:
    """A URL for the database this test run uses (test_<name>), for child processes."""
    settings = connection.settings_dict
    host = quote(settings["HOST"] or "", safe="")
    port = f":{settings['PORT']}" if settings["PORT"] else ""
    return f"postgresql://{settings['USER']}@{host}{port}/{settings['NAME']}"


def run_django(
    code: str, *, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python with Django set up on the test database."""
    prelude = "import django\ndjango.setup()\n"
    return run_python(
        ["-c", prelude + textwrap.dedent(code)],
        env={
            **os.environ,
            "DATABASE_URL": child_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            **(env or {}),
        },
        timeout=timeout,
    )


def run_python(
    args: list[str], *, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the project root with exactly ``env``; its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def post_and_die(
    *, user, path: str, key: str, after_sql: str, settings
) -> subprocess.CompletedProcess[str]:
    """POST ``path`` as ``user`` in a child process that dies (exit 137) right after
    ``after_sql`` runs: a server process of the same shop killed mid-request."""
    env = {"PROVIDER_BASE_URL": settings.PROVIDER_BASE_URL, "SHOP_BASE_URL": settings.SHOP_BASE_URL}
    return run_django(
        env=env,
        code=f"""
        import os
        from django.db import connection
        from rest_framework.test import APIClient

        def die(execute, sql, params, many, context):
            result = execute(sql, params, many, context)
            if sql.startswith({after_sql!r}):
                os._exit(137)
            return result

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token {user.auth_token.key}")
        with connection.execute_wrapper(die):
            client.post("{path}", {{}}, format="json", headers={{"Idempotency-Key": "{key}"}})
    """,
    )


@contextmanager
def session_ended_before(sql_prefix: str) -> Iterator[list[int]]:
    """End the server session behind Django's connection just before its first
    statement that starts with ``sql_prefix`` (the chaos run's `terminate-backends`, at
    a chosen moment). Yields the list of ended backend pids: one once it has happened."""
    admin = psycopg.connect(child_database_url(), autocommit=True)
    ended: list[int] = []

    def end_the_session(execute, sql, params, many, context):
        if not ended and sql.startswith(sql_prefix):
            raw = context["cursor"]
            raw.execute("SELECT pg_backend_pid()")
            (pid,) = raw.fetchone()
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            ended.append(pid)
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(end_the_session):
            yield ended
    finally:
        admin.close()
