"""$(VAR) expansion with the kubelet's rules (its third_party/forked/golang/expansion tests), and
the limit that stops it before the output is built."""

from __future__ import annotations

import tracemalloc

import pytest

from services.pod_sync.expansion import ExpansionTooLarge, expand

VARS = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": "", "ÖÄÜ": "umlauts"}


@pytest.mark.parametrize("text, want", [
    ("$(VAR_A)", "A"),
    ("___$(VAR_B)___", "___B___"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$(VAR_A)(VAR_B)", "A(VAR_B)"),
    ("$(VAR_EMPTY)", ""),
    ("$(ÖÄÜ)", "umlauts"),
    # undefined: stays as written
    ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$()", "$()"),
    ("x$(VAR_DNE)y$(VAR_C)", "x$(VAR_DNE)yC"),
    # $$ escapes
    ("$$(VAR_B)", "$(VAR_B)"),
    ("$$$(VAR_A)", "$A"),
    ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("f000-$$VAR_A", "f000-$VAR_A"),
    # a $ before anything else, and a lone trailing $, stay
    ("$VAR_A", "$VAR_A"),
    ("foo\\$(VAR_A)bar", "foo\\Abar"),
    ("a$", "a$"),
    ("$", "$"),
    # `$(` without `)`: as written, and what follows is still scanned
    ("$(VAR_A", "$(VAR_A"),
    ("$(VAR_A $(VAR_B", "$(VAR_A $(VAR_B"),
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("$$$(VAR_A$(VAR_B)", "$$(VAR_A$(VAR_B)"),
    ("$(", "$("),
    # a value is put in once, never scanned again
    ("$(VAR_REF)", "$(VAR_A)"),
    ("$(VAR_REF)$(VAR_REF)", "$(VAR_A)$(VAR_A)"),
])
def test_the_kubelets_rules(text, want):
    assert expand(text, VARS.get) == want


def test_the_limit_counts_utf8_bytes_of_the_output():
    assert expand("$(A)$(A)", {"A": "x" * 10}.get, limit=20) == "x" * 20
    with pytest.raises(ExpansionTooLarge) as exc:
        expand("$(A)$(A)", {"A": "x" * 10}.get, limit=19)
    assert exc.value.limit == 19 and str(exc.value) == "expands to more than 19 bytes"
    assert expand("é", {}.get, limit=2) == "é"
    with pytest.raises(ExpansionTooLarge):
        expand("é", {}.get, limit=1)


def test_a_reference_to_a_huge_value_stops_before_the_output_is_built():
    big = {"BIG": "x" * 2**20}
    tracemalloc.start()
    try:
        with pytest.raises(ExpansionTooLarge):
            expand("$(BIG)" * 1000, big.get, limit=2**21)  # asks for 1000 MiB
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"expansion held {peak} bytes on the way to refusing"
