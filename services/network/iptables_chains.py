"""makeIPTablesUtilChains (default true): the iptables chains the kubelet 1.37 makes for other
components of the node, which pykubelet makes the same way.

- `KUBE-IPTABLES-HINT` in the mangle table, for IPv4 and IPv6: its presence in iptables-legacy or
  iptables-nft tells kube-proxy and CNI agents which of the two the node uses.
- `KUBE-FIREWALL` in the filter table (IPv4 only), jumped to first from INPUT and OUTPUT, dropping
  packets for 127.0.0.0/8 that do not come from it (kubernetes#90259: kube-proxy's
  `route_localnet` would let other hosts reach the node's loopback services). kube-proxy makes an
  identical rule; either keeps it.
- `KUBE-KUBELET-CANARY` in mangle, nat and filter: when it is gone, someone flushed the tables
  (a firewall reload), and the chains above are made again, checked every minute as the
  kubelet's iptables monitor does.

Best effort, as the kubelet: a family whose iptables cannot be run is skipped, and a failure is
logged and tried again at the next check; nothing else of the node waits for these chains.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

HINT_CHAIN = "KUBE-IPTABLES-HINT"
FIREWALL_CHAIN = "KUBE-FIREWALL"
CANARY_CHAIN = "KUBE-KUBELET-CANARY"
CANARY_TABLES = ("mangle", "nat", "filter")
LOCALNET_DROP = ("-m", "comment", "--comment", "block incoming localnet connections", "--dst", "127.0.0.0/8",
                 "!", "--src", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT",
                 "-j", "DROP")
MONITOR_EVERY = 60.0       # the kubelet's
FLUSH_SETTLE = 5.0         # after the first canary is gone, how long the others may take
COMMAND_TIMEOUT = 30.0
LOCK_WAIT = "5"            # seconds iptables waits for the xtables lock

# argv -> (exit code, output); a fake in tests/unit/test_iptables_chains.py.
Runner = Callable[[list[str]], Awaitable[tuple[int, str]]]


async def run_command(argv: list[str]) -> tuple[int, str]:
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
    except OSError as exc:  # the binary gone since it was found
        return 127, f"{argv[0]}: {exc}"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), COMMAND_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, f"{' '.join(argv)} did not finish in {COMMAND_TIMEOUT:.0f}s"
    return proc.returncode or 0, out.decode(errors="replace").strip()


class IPTablesError(Exception):
    pass


@dataclass
class IPTables:
    """One family's iptables (`iptables` or `ip6tables`), as the kubelet's utiliptables uses it."""

    binary: str
    run: Runner = run_command

    @property
    def ipv6(self) -> bool:
        return self.binary.rsplit("/", 1)[-1].startswith("ip6")

    async def _call(self, *args: str) -> tuple[int, str]:
        return await self.run([self.binary, "-w", LOCK_WAIT, *args])

    async def present(self) -> bool:
        return (await self._call("-t", "nat", "-S", "POSTROUTING"))[0] == 0

    async def chain_exists(self, table: str, chain: str) -> bool:
        return (await self._call("-t", table, "-S", chain))[0] == 0

    async def ensure_chain(self, table: str, chain: str) -> None:
        code, out = await self._call("-t", table, "-N", chain)
        if code != 0 and not await self.chain_exists(table, chain):
            raise IPTablesError(f"{self.binary} -t {table} -N {chain}: {out}")

    async def ensure_rule(self, where: str, table: str, chain: str, *rule: str) -> None:
        """`where` is -I (first in the chain) or -A (last); nothing when the rule is there."""
        if (await self._call("-t", table, "-C", chain, *rule))[0] == 0:
            return
        code, out = await self._call("-t", table, where, chain, *rule)
        if code != 0:
            raise IPTablesError(f"{self.binary} -t {table} {where} {chain} {' '.join(rule)}: {out}")


async def sync_util_chains(ipt: IPTables) -> bool:
    """Make the chains and rules this family should have; False (and the reason logged) on failure."""
    try:
        await ipt.ensure_chain("mangle", HINT_CHAIN)
        if not ipt.ipv6:  # IPv6 has no route_localnet hole
            await ipt.ensure_chain("filter", FIREWALL_CHAIN)
            await ipt.ensure_rule("-I", "filter", "OUTPUT", "-j", FIREWALL_CHAIN)
            await ipt.ensure_rule("-I", "filter", "INPUT", "-j", FIREWALL_CHAIN)
            await ipt.ensure_rule("-A", "filter", FIREWALL_CHAIN, *LOCALNET_DROP)
    except IPTablesError as exc:
        log.error("iptables util chains (makeIPTablesUtilChains): %s; some functionality may be missing, trying "
                  "again at the next check", exc)
        return False
    return True


async def _canaries_present(ipt: IPTables) -> bool:
    try:
        for table in CANARY_TABLES:
            await ipt.ensure_chain(table, CANARY_CHAIN)
    except IPTablesError as exc:
        log.warning("iptables canary chain: %s", exc)
        return False
    return True


async def _flushed(ipt: IPTables) -> None:
    """Until the first table's canary is gone, then (at most FLUSH_SETTLE) the others'."""
    while await ipt.chain_exists(CANARY_TABLES[0], CANARY_CHAIN):
        await asyncio.sleep(MONITOR_EVERY)
    deadline = asyncio.get_running_loop().time() + FLUSH_SETTLE
    while asyncio.get_running_loop().time() < deadline:
        if not any([await ipt.chain_exists(t, CANARY_CHAIN) for t in CANARY_TABLES[1:]]):
            return
        await asyncio.sleep(0.1)
    log.info("inconsistent iptables state: the %s chain is gone from some tables only", CANARY_CHAIN)


async def keep_util_chains(ipt: IPTables) -> None:
    """Make the chains, then make them again whenever the tables were flushed (forever)."""
    if not await sync_util_chains(ipt):
        log.info("failed to initialize %s rules; some functionality may be missing", ipt.binary)
    else:
        log.info("initialized %s rules (%s%s)", ipt.binary, HINT_CHAIN, "" if ipt.ipv6 else f", {FIREWALL_CHAIN}")
    while True:
        while not await _canaries_present(ipt):
            await asyncio.sleep(MONITOR_EVERY)
        await _flushed(ipt)
        log.info("%s was flushed (the %s chain is gone): making the util chains again", ipt.binary, CANARY_CHAIN)
        await sync_util_chains(ipt)


async def present_families(run: Runner = run_command) -> list[IPTables]:
    """The families whose iptables this host can run (none: said, as the kubelet says it)."""
    found = []
    for name in ("iptables", "ip6tables"):
        binary = shutil.which(name)
        if binary is not None and await (ipt := IPTables(binary, run)).present():
            found.append(ipt)
    if not found:
        log.info("No iptables support on this system; not creating the %s chain", HINT_CHAIN)
    return found


async def keep_every_family(run: Runner = run_command) -> None:
    """keep_util_chains for each family this host has; returns only when it has none."""
    await asyncio.gather(*(keep_util_chains(ipt) for ipt in await present_families(run)))
