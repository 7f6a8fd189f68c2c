"""The alerting rules: each parses, names only metrics /metrics exposes, has a runbook,
and fires past its bound and not before.

The last is promtool's job (`promtool check rules`, `promtool test rules` over
deploy/prometheus/alerts.test.yml): Debian's `prometheus` package ships it and
CI installs it (.ci/run). Where it is absent the promtool test is skipped, except
under CI, where it fails: CI never passes without it. The checks that need no
promtool (names, labels, runbooks, every alert unit-tested) always run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from operations.audit.run import audit_run
from operations.statements.passes import pass_run_once
from tests.conftest import new_key
from tests.observability.conftest import Samples

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
PROMTOOL = shutil.which("promtool")
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


def test_every_alert_has_a_promtool_unit_test_that_fires_it():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        check["alertname"]
        for test in tests
        for check in test["alert_rule_test"]
        if check.get("exp_alerts")
    }

    assert {rule["alert"] for rule in rules()} <= fired


@pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="needs promtool (Debian's prometheus package; CI installs it)",
)
def test_promtool_checks_the_rules_and_each_alert_fires_past_its_bound_only():
    assert PROMTOOL, "CI must have promtool: .ci/run installs Debian's prometheus package"
    for command in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        result = subprocess.run(
            [PROMTOOL, *command], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
