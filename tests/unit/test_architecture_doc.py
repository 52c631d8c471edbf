"""docs/store-and-bus.md is what the code says: every table with its one writer and its readers,
every event with its publishers and subscribers (tests/architecture_doc.py)."""

from __future__ import annotations

from tests import architecture_doc


def test_the_store_and_bus_doc_is_what_the_code_says():
    doc = architecture_doc.REPO / "docs" / "store-and-bus.md"
    assert doc.read_text() == architecture_doc.render(), \
        "docs/store-and-bus.md is out of date: .venv/bin/python -m tests.architecture_doc > docs/store-and-bus.md"


def test_every_table_has_a_writer_and_every_event_a_publisher():
    text = architecture_doc.render()
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(cells[2].strip() for cells in rows), "a table without a writer or an event without a publisher"
