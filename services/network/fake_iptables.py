"""A fake of the iptables command for the unit tests of services/network/iptables_chains.py: it
keeps tables of chains and their rules and answers -S, -N, -C, -I and -A as iptables does (exit
code 1 for a chain that exists or a rule or chain that does not)."""

from __future__ import annotations

BUILTIN = {"filter": ("INPUT", "FORWARD", "OUTPUT"), "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
           "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")}


class FakeIPTables:
    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[tuple[str, ...]]]] = {
            table: {chain: [] for chain in chains} for table, chains in BUILTIN.items()}
        self.calls: list[list[str]] = []
        self.broken = False  # every command fails, as with no kernel support

    def flush(self) -> None:
        """What a firewall reload does: every chain but the built-in ones gone, those emptied."""
        self.tables = {table: {chain: [] for chain in chains} for table, chains in BUILTIN.items()}

    async def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        if self.broken:
            return 3, "iptables: Failed to initialize nft: Protocol not supported"
        args = argv[1:]
        assert args[:2] == ["-w", "5"], argv
        args = args[2:]
        assert args[0] == "-t", argv
        table, op, chain, *rule = args[1:]
        chains = self.tables[table]
        if op == "-N":
            if chain in chains:
                return 1, "iptables: Chain already exists."
            chains[chain] = []
            return 0, ""
        if chain not in chains:
            return 1, f"iptables: No chain/target/match by that name. ({chain})"
        if op == "-S":
            return 0, "\n".join(" ".join(("-A", chain, *r)) for r in chains[chain])
        if op == "-C":
            return (0, "") if tuple(rule) in chains[chain] else (1, "iptables: Bad rule.")
        target = rule[rule.index("-j") + 1] if "-j" in rule else None
        if target is not None and target not in chains and target not in ("DROP", "ACCEPT", "RETURN"):
            return 2, f"iptables v1.8.9 (nf_tables): Chain '{target}' does not exist"
        if op == "-I":
            chains[chain].insert(0, tuple(rule))
        elif op == "-A":
            chains[chain].append(tuple(rule))
        else:
            raise AssertionError(f"not faked: {argv}")
        return 0, ""
