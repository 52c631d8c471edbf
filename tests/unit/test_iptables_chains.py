"""makeIPTablesUtilChains (services/network/iptables_chains.py) against the fake iptables: the
kubelet 1.37's chains and rules, made once whatever the number of syncs, IPv6 without the
firewall, again after a flush of the tables, and nothing but a log line where iptables fails."""

from __future__ import annotations

import asyncio
import logging

import pytest

from services.network import iptables_chains as ic
from services.network.fake_iptables import FakeIPTables
from shared.config.settings import ConfigError, load_kubelet_config


async def test_the_kubelets_chains_and_rules_are_made_once():
    fake = FakeIPTables()
    ipt = ic.IPTables("/usr/sbin/iptables", fake)
    assert await ic.sync_util_chains(ipt)
    assert await ic.sync_util_chains(ipt)  # again: nothing doubled
    filter_ = fake.tables["filter"]
    assert fake.tables["mangle"][ic.HINT_CHAIN] == []
    assert filter_["INPUT"] == [("-j", "KUBE-FIREWALL")] and filter_["OUTPUT"] == [("-j", "KUBE-FIREWALL")]
    assert filter_[ic.FIREWALL_CHAIN] == [(
        "-m", "comment", "--comment", "block incoming localnet connections", "--dst", "127.0.0.0/8", "!", "--src",
        "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP")]


async def test_a_jump_to_the_firewall_goes_first_in_input_and_output():
    fake = FakeIPTables()
    fake.tables["filter"]["INPUT"].append(("-p", "tcp", "-j", "ACCEPT"))
    assert await ic.sync_util_chains(ic.IPTables("/usr/sbin/iptables", fake))
    assert fake.tables["filter"]["INPUT"][0] == ("-j", "KUBE-FIREWALL")


async def test_ipv6_gets_only_the_hint_chain():
    fake = FakeIPTables()
    ipt = ic.IPTables("/usr/sbin/ip6tables", fake)
    assert ipt.ipv6 and await ic.sync_util_chains(ipt)
    assert ic.HINT_CHAIN in fake.tables["mangle"] and ic.FIREWALL_CHAIN not in fake.tables["filter"]


async def test_a_failure_is_logged_and_reported_not_raised(caplog):
    fake = FakeIPTables()
    fake.broken = True
    with caplog.at_level(logging.ERROR):
        assert not await ic.sync_util_chains(ic.IPTables("/usr/sbin/iptables", fake))
    assert "Failed to initialize nft" in caplog.text and "makeIPTablesUtilChains" in caplog.text


async def test_the_chains_are_made_again_after_the_tables_are_flushed(monkeypatch):
    monkeypatch.setattr(ic, "MONITOR_EVERY", 0.05)
    fake = FakeIPTables()
    task = asyncio.create_task(ic.keep_util_chains(ic.IPTables("/usr/sbin/iptables", fake)))
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if all(ic.CANARY_CHAIN in fake.tables[t] for t in ic.CANARY_TABLES):
                break
        assert ic.FIREWALL_CHAIN in fake.tables["filter"]
        fake.flush()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if ic.FIREWALL_CHAIN in fake.tables["filter"] and fake.tables["filter"]["INPUT"]:
                break
        assert fake.tables["filter"]["INPUT"] == [("-j", "KUBE-FIREWALL")]
        assert ic.HINT_CHAIN in fake.tables["mangle"]
    finally:
        task.cancel()


async def test_a_host_without_iptables_is_said_once(monkeypatch, caplog):
    fake = FakeIPTables()
    fake.broken = True
    monkeypatch.setattr(ic.shutil, "which", lambda name: f"/usr/sbin/{name}")
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(ic.keep_every_family(fake), 5)  # returns: nothing to keep
    assert "No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain" in caplog.text


@pytest.mark.parametrize(("name", "value", "error"), [
    ("iptablesMasqueradeBit", 32,
     "invalid configuration: iptablesMasqueradeBit (--iptables-masquerade-bit) 32 must be between 0 and 31, inclusive"),
    ("iptablesDropBit", -1, "invalid configuration: iptablesDropBit (--iptables-drop-bit) -1 must be between 0 and 31, "
                            "inclusive"),
])
def test_the_iptables_bits_are_checked_as_the_kubelet_checks_them(name, value, error):
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config({name: value})
    assert error in str(exc.value)
    assert load_kubelet_config({name: 31})[0].model_dump(by_alias=True)[name] == 31
