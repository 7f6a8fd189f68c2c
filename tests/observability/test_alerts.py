"""The alerting rules: each parses, names only metrics /metrics exposes, has a runbook.

promtool is not available where these tests run, so PromQL is checked for shape
only (balanced brackets and quotes, at least one known metric, label names the
metric really has); `promtool check rules` in a CI that has it checks the rest.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from reconcile.audit import audit_run
from reconcile.services.passes import pass_run_once
from tests.conftest import new_key
from tests.observability.conftest import Samples

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RUNBOOK = ROOT / "docs" / "operating.md"

# A metric name with its optional label matchers: onceshop_x{a="b", c=~"d"}
_SELECTOR = re.compile(r"\b(onceshop_[a-z0-9_]+)\s*(\{[^}]*\})?")
_MATCHER_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')
_PAIRS = {")": "(", "]": "[", "}": "{"}


def rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def balanced(expr: str) -> bool:
    stack: list[str] = []
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    if without_strings.count('"') % 2:
        return False
    for char in without_strings:
        if char in "([{":
            stack.append(char)
        elif char in _PAIRS and (not stack or stack.pop() != _PAIRS[char]):
            return False
    return not stack


def exposed_labels(samples: Samples) -> dict[str, set[str]]:
    """Each exposed sample name -> the label names its series carry."""
    names: dict[str, set[str]] = {}
    for name, labels in samples:
        names.setdefault(name, set()).update(label for label, _ in labels)
    return names


@pytest.fixture
def exercised(scrape, pay, fault, create_order, settings) -> Samples:
    """/metrics after the app did what the alerts watch: a replay, a provider timeout
    (a 503), a reconcile pass and an audit."""
    key = new_key()
    create_order(key)
    create_order(key)
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    assert pay().status_code == 503
    settings.RECONCILE_AFTER_S = 0
    pass_run_once()
    audit_run()
    return scrape()


def test_the_rules_file_parses_and_every_alert_has_a_runbook_section():
    headings = set(re.findall(r"^### (\S+)$", RUNBOOK.read_text(), flags=re.MULTILINE))

    assert rules()
    for rule in rules():
        alert = rule["alert"]
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, alert
        assert rule["labels"]["severity"] in {"page", "ticket"}, alert
        assert rule["annotations"]["summary"], alert
        assert rule["annotations"]["runbook"] == f"docs/operating.md#{alert.lower()}"
        assert alert in headings, f"docs/operating.md has no '### {alert}'"


@pytest.mark.django_db(transaction=True)
def test_every_rule_names_only_metrics_and_labels_that_metrics_exposes(exercised):
    exposed = exposed_labels(exercised)

    for rule in rules():
        expr = rule["expr"]
        assert balanced(expr), rule["alert"]
        selectors = _SELECTOR.findall(expr)
        assert selectors, f"{rule['alert']} names no onceshop metric"
        for name, matchers in selectors:
            assert name in exposed, f"{rule['alert']}: {name} is not exposed"
            for label in _MATCHER_LABEL.findall(matchers):
                assert label in exposed[name], f"{rule['alert']}: {name} has no label {label}"


def test_the_shape_check_catches_what_it_should():
    assert balanced('sum(rate(x{a="(b"}[5m])) > 0')
    assert not balanced("sum(rate(x[5m]) > 0")
    assert not balanced('x{a="b}')
