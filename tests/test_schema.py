"""Issue 11: the published OpenAPI schema is one a client generator can take literally."""

import re
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from edge.errors import PROBLEM_CONTENT_TYPE
from idempotency.drf import HEADER_PATTERN


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The schema as ``manage.py spectacular`` writes it: validated, and failing on any
    warning (a component name collision is a warning: it documents the wrong body)."""
    path = tmp_path_factory.mktemp("schema") / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    ]


def component(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def test_the_schema_generates_with_no_warning_and_validates(schema):
    assert schema["openapi"].startswith("3.")


def test_creating_a_product_documents_the_product_fields(schema):
    body = schema["paths"]["/api/v1/products/"]["post"]["requestBody"]
    fields = component(schema, body["content"]["application/json"]["schema"]["$ref"])

    assert set(fields["properties"]) == {"sku", "name", "price", "currency", "stock"}


@pytest.mark.parametrize("path", ["/api/v1/products/", "/api/v1/orders/"])
def test_lists_are_documented_as_the_pages_they_are(schema, path):
    operation = schema["paths"][path]["get"]
    page = component(
        schema, operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    )

    assert {"count", "next", "previous", "results"} <= set(page["properties"])
    assert page["properties"]["results"]["type"] == "array"
    assert {"page", "page_size"} <= {p["name"] for p in operation["parameters"]}


def test_every_error_is_documented_as_problem_json(schema):
    for method, path, operation in operations(schema):
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                assert list(response["content"]) == [PROBLEM_CONTENT_TYPE], (method, path, status)


def test_the_framework_answers_are_documented_where_they_can_occur(schema):
    paths = schema["paths"]
    create = paths["/api/v1/orders/"]["post"]["responses"]
    assert {"400", "401", "403", "405", "409", "411", "413", "415", "422", "429"} <= set(create)
    assert {"401", "404", "405", "429"} <= set(
        paths["/api/v1/orders/{number}/"]["get"]["responses"]
    )
    assert "403" in paths["/api/v1/products/"]["post"]["responses"]
    assert "404" in paths["/api/v1/orders/{number}/pay/"]["post"]["responses"]
    # Logins are throttled per address and per username, before the password check.
    assert (
        "login-throttled" in paths["/api/v1/auth/token/"]["post"]["responses"]["429"]["description"]
    )
    # The callback is throttled per source address; it has no JSON parser.
    assert "429" in paths["/api/v1/callbacks/sandbox/"]["post"]["responses"]
    assert "415" not in paths["/api/v1/callbacks/sandbox/"]["post"]["responses"]


@pytest.mark.parametrize(
    "path",
    ["/api/v1/orders/", "/api/v1/orders/{number}/pay/", "/api/v1/orders/{number}/cancel/"],
)
def test_the_idempotency_key_header_states_its_pattern_and_length(schema, path):
    (header,) = [
        p for p in schema["paths"][path]["post"]["parameters"] if p["name"] == "Idempotency-Key"
    ]

    assert header["in"] == "header"
    assert header["required"] is True
    assert header["schema"]["pattern"] == HEADER_PATTERN
    assert header["schema"]["maxLength"] == 257  # 255 characters, quoted as an sf-string


def callback_bodies(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The callback's documented bodies, by component name (one per kind of event)."""
    operation = schema["paths"]["/api/v1/callbacks/sandbox/"]["post"]
    documented = operation["requestBody"]["content"]["application/json"]["schema"]
    refs = [choice["$ref"] for choice in component(schema, documented["$ref"])["oneOf"]]
    # Request bodies are components of their own (``...Request``): name them as served.
    return {ref.rsplit("/", 1)[-1].removesuffix("Request"): component(schema, ref) for ref in refs}


def test_the_callback_documents_its_body_and_signature_header(schema):
    operation = schema["paths"]["/api/v1/callbacks/sandbox/"]["post"]
    body = callback_bodies(schema)["SandboxChargeNotification"]
    (signature,) = [p for p in operation["parameters"] if p["name"] == "Sandbox-Signature"]

    assert set(body["required"]) >= {"notify_id", "trade_no", "out_trade_no", "amount"}
    assert body["properties"]["notify_id"]["maxLength"] == 64
    assert signature["in"] == "header"
    assert signature["required"] is True
    assert signature["schema"]["pattern"].startswith("^t=[0-9]{1,12}")


def test_the_callback_documents_refund_notifications_beside_charge_ones(schema):
    bodies = callback_bodies(schema)
    refund = bodies["SandboxRefundNotification"]

    assert set(bodies) == {
        "SandboxChargeNotification",
        "SandboxRefundNotification",
        "SandboxDisputeNotification",
    }
    assert component(schema, refund["properties"]["event"]["$ref"])["enum"] == ["refund"]
    dispute = bodies["SandboxDisputeNotification"]
    assert component(schema, dispute["properties"]["event"]["$ref"])["enum"] == ["dispute"]
    assert set(dispute["required"]) >= {"event", "notify_id", "dispute_id", "trade_no", "status"}
    assert set(refund["required"]) >= {
        "event",
        "notify_id",
        "refund_id",
        "out_refund_no",
        "out_trade_no",
        "status",
        "amount",
    }
    assert "event" not in bodies["SandboxChargeNotification"]["properties"]


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/orders/", "201"),
        ("/api/v1/orders/{number}/pay/", "200"),
        ("/api/v1/orders/{number}/cancel/", "200"),
        ("/api/v1/orders/{number}/refunds/", "200"),
    ],
)
def test_an_order_answer_links_to_every_next_step_including_a_refund(schema, path, status):
    links = schema["paths"][path]["post"]["responses"][status]["links"]

    assert {"GetOrder", "PayOrder", "CancelOrder", "RefundOrder"} <= set(links)
    assert links["RefundOrder"]["parameters"] == {"number": "$response.body#/number"}


def request_body_strings(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every string a client may write in a JSON request body, with where it is."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(node: dict[str, Any], where: str) -> None:
        if "$ref" in node:
            node = component(schema, node["$ref"])
        for keyword in ("oneOf", "anyOf", "allOf"):
            for choice in node.get(keyword, []):
                walk(choice, where)
        for name, field in node.get("properties", {}).items():
            walk(field, f"{where}.{name}")
        if node.get("type") == "array":
            walk(node["items"], f"{where}[]")
        if node.get("type") == "string" and not node.get("readOnly"):
            found.append((where, node))

    for method, path, operation in operations(schema):
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if body:
            walk(body["schema"], f"{method} {path}")
    return found


def states_what_it_refuses(field: dict[str, Any]) -> bool:
    """An enum, a date or an empty string cannot hold a NUL; any other string's
    pattern must refuse one (searched, as JSON Schema does: unanchored)."""
    if "enum" in field or "format" in field or field.get("maxLength") == 0:
        return True
    return "pattern" in field and re.search(field["pattern"], "a\x00b") is None


def test_every_request_string_says_what_the_server_refuses_in_it(schema):
    # The server refuses a NUL in every string (no column can hold one). A schema that
    # does not say so documents a request as valid that gets a 400: a client generator,
    # or Schemathesis, takes "type: string" literally.
    strings = request_body_strings(schema)
    assert len(strings) > 10, "the walk found too few request strings: it checks nothing"

    assert [where for where, field in strings if not states_what_it_refuses(field)] == []
