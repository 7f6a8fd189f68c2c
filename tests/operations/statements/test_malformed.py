"""A statement the shop cannot read is refused whole, with a clear reason: nothing of it
is imported, the import row says why, the audit reports it, the command exits 1.

The provider here is a tiny HTTP server that answers the statement URL with the
bytes a test gives it (a provider with a bug, or a proxy mangling the file).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command

from operations.audit.checks import statements as statement_checks
from operations.statements.importing import StatementFailed, statement_reconcile
from operations.statements.models import StatementImport, StatementLine
from tests.operations.statements.helpers import statement_findings

pytestmark = pytest.mark.django_db

DAY = date(2026, 11, 30)
HEADER = b"type,provider_id,merchant_reference,amount,currency,status,settled_at\n"
GOOD = b"charge,T1,P1,1999,CNY,SUCCESS,2026-11-30T10:00:00Z\n"


class _Served:
    status = 200
    body = b""
    declared_length: int | None = None  # more than the body: the download breaks off


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(_Served.status)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Length", str(_Served.declared_length or len(_Served.body)))
        self.end_headers()
        self.wfile.write(_Served.body)
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve(settings) -> Iterator[type[_Served]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.PROVIDER_BASE_URL = f"http://127.0.0.1:{server.server_address[1]}/sandbox"
    settings.PROVIDER_TIMEOUT_S = 2.0
    try:
        yield _Served
    finally:
        server.shutdown()
        server.server_close()
        _Served.status, _Served.body, _Served.declared_length = 200, b"", None


MALFORMED = {
    "bad-csv": (HEADER + GOOD + b'charge,T2,"P2,100,CNY,SUCCESS,2026-11-30T10:00:00Z\n', "line 3"),
    "unknown-type": (
        HEADER + GOOD + b"payout,T2,P2,100,CNY,SUCCESS,2026-11-30T10:00:00Z\n",
        "unknown type 'payout'",
    ),
    "currency-lowercase": (
        HEADER + b"charge,T1,P1,1999,cny,SUCCESS,2026-11-30T10:00:00Z\n",
        "ISO 4217",
    ),
    "currency-symbol": (
        HEADER + b"charge,T1,P1,1999,RMB1,SUCCESS,2026-11-30T10:00:00Z\n",
        "ISO 4217",
    ),
    "amount-decimal": (
        HEADER + b"charge,T1,P1,19.99,CNY,SUCCESS,2026-11-30T10:00:00Z\n",
        "minor units",
    ),
    "amount-negative": (
        HEADER + b"refund,R1,X1,-5,CNY,SUCCESS,2026-11-30T10:00:00Z\n",
        "minor units",
    ),
    "status-declined": (
        HEADER + b"charge,T1,P1,1999,CNY,DECLINED,2026-11-30T10:00:00Z\n",
        "status",
    ),
    "another-day": (
        HEADER + b"charge,T1,P1,1999,CNY,SUCCESS,2026-12-01T10:00:00Z\n",
        "not on 2026-11-30",
    ),
    "no-offset": (HEADER + b"charge,T1,P1,1999,CNY,SUCCESS,2026-11-30T10:00:00\n", "UTC offset"),
    "missing-field": (HEADER + b"charge,T1,P1,1999,CNY,SUCCESS\n", "6 fields, expected 7"),
    "wrong-header": (b"kind,id,ref,amount,currency,status,at\n" + GOOD, "line 1: the header"),
    "empty-body": (b"", "line 1: the header"),
    "not-utf8": (HEADER + b"charge,T1,P\xff1,1999,CNY,SUCCESS,2026-11-30T10:00:00Z\n", "UTF-8"),
    "nul-in-reference": (
        HEADER + b"charge,T1,P\x001,1999,CNY,SUCCESS,2026-11-30T10:00:00Z\n",
        "line 2",
    ),
}


@pytest.mark.parametrize(("body", "reason"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_statement_is_refused_whole_with_its_reason(serve, body, reason):
    serve.body = body

    with pytest.raises(StatementFailed, match=reason):
        statement_reconcile(day=DAY)

    # Nothing half-imported: not even the good lines before the bad one
    assert StatementLine.objects.count() == 0
    statement = StatementImport.objects.get()
    assert reason in statement.error
    assert statement.downloads == 0
    assert statement_checks.STATEMENT_IMPORTED in {f.invariant for f in statement_findings()}


def test_the_command_exits_1_and_says_why(serve):
    serve.body = HEADER + b"payout,T2,P2,100,CNY,SUCCESS,2026-11-30T10:00:00Z\n"
    with pytest.raises(CommandError, match=r"statement 2026-11-30 not imported: .*payout"):
        call_command("reconcile_statement", "--date", "2026-11-30")


def test_a_download_that_breaks_off_keeps_nothing(serve):
    serve.body = HEADER + GOOD
    serve.declared_length = len(serve.body) + 500  # the connection closes early

    with pytest.raises(StatementFailed, match="ProviderOutcomeUnknown"):
        statement_reconcile(day=DAY)
    assert StatementLine.objects.count() == 0


def test_a_provider_error_keeps_nothing_and_the_next_run_imports(serve):
    serve.status, serve.body = 503, b"busy"
    with pytest.raises(StatementFailed, match="HTTP 503"):
        statement_reconcile(day=DAY)

    serve.status, serve.body = 200, HEADER
    statement_reconcile(day=DAY)
    assert StatementImport.objects.get().error == ""  # the good download clears it


@pytest.mark.parametrize("given", ["2026-13-01", "yesterday", "2026/11/30"])
def test_the_command_refuses_a_date_it_cannot_read(given):
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("reconcile_statement", "--date", given)
