"""The "Where it lives" table: every symbol and constraint is real, and the README
and /how-it-works/ carry the same table."""

import importlib
from pathlib import Path

import pytest
from django.apps import apps
from django.test import Client

from demo.shop.concepts import CONCEPTS, audit_checks, concepts_markdown

ROOT = Path(__file__).resolve().parents[3]


def _constraint_names() -> set[str]:
    return {
        constraint.name
        for model in apps.get_models()
        for constraint in model._meta.constraints
        if constraint.name
    }


def test_every_symbol_imports_from_the_file_it_names():
    for concept in CONCEPTS:
        for symbol in concept.symbols:
            module, name = symbol.rsplit(".", 1)
            assert hasattr(importlib.import_module(module), name), symbol
        for file in concept.files:
            assert (ROOT / file).is_file(), file


def test_every_constraint_named_exists_on_a_model_and_every_doc_exists():
    names = _constraint_names()
    for concept in CONCEPTS:
        assert set(concept.constraints) <= names, concept.idea
        if concept.doc:
            assert (ROOT / concept.doc).is_file(), concept.doc


def test_the_readme_carries_the_table_as_generated():
    assert concepts_markdown() in (ROOT / "README.md").read_text()


def test_the_audit_doc_lists_every_check_with_its_function():
    doc = (ROOT / "docs" / "audit.md").read_text()
    for title, function in audit_checks():
        module, name = function.rsplit(".", 1)
        assert f"| {title} | `{module.replace('.', '/')}.py` `{name}` |" in doc, title


@pytest.mark.django_db
def test_how_it_works_shows_the_table_and_the_audit_checks():
    # The names break only at their separators there (<wbr>, which adds no character).
    page = Client().get("/how-it-works/").content.decode().replace("<wbr>", "")

    assert "<title>How it works · OnceShop</title>" in page
    assert "Where it lives" in page
    for concept in CONCEPTS:
        for name in concept.constraints:
            assert f"<code>{name}</code>" in page
    for _title, function in audit_checks():
        assert f"<code>{function}</code>" in page
