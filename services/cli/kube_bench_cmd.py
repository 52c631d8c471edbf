"""`pykubelet kube-bench-config`: a kube-bench config.yaml that finds this node.

kube-bench finds a kubelet by its process name and by the kubelet's usual file names
(node.kubelet in its cfg/config.yaml). This prints kube-bench's own config with pykubelet's
names put first in each of those lists: the `pykubelet` processes (whose command lines carry the
node's flags), the pod-sync unit, <config-dir>/config.yaml, the client CA and the kubeconfig
install was given. kube-bench's own candidates stay after them. Use it as

    kube-bench --config-dir CFG --config <(pykubelet kube-bench-config --from CFG/config.yaml) \\
        run --targets node --benchmark cis-1.12
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from shared.model import safe_yaml
from shared.process.title import COMMAND_NAME


def pykubelet_paths(config_dir: Path, unit_dir: Path, kubeconfig: str) -> dict[str, list[str]]:
    """node.kubelet's candidate lists for a node `pykubelet install` set up."""
    paths = {"bins": [COMMAND_NAME],
             "svc": [str(unit_dir / "pykubelet-pod-sync.service")],
             "confs": [str(config_dir / "config.yaml")],
             "cafile": [str(config_dir / "pki" / "ca.crt")],
             "kubeconfig": [kubeconfig] if kubeconfig else []}
    return paths


def installed_kubeconfig(config_dir: Path) -> str:
    """The --kubeconfig install wrote into <config-dir>/flags.env, if any."""
    try:
        text = (config_dir / "flags.env").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith("PYKUBELET_ARGS="):
            # systemd unquotes the value once; the services' command line splits it again.
            value = "".join(shlex.split(line.removeprefix("PYKUBELET_ARGS=")))
            for arg in shlex.split(value):
                if arg.startswith("--kubeconfig="):
                    return arg.removeprefix("--kubeconfig=")
    return ""


def merged(base: dict[str, Any], paths: dict[str, list[str]]) -> dict[str, Any]:
    node = base.get("node")
    kubelet = node.get("kubelet") if isinstance(node, dict) else None
    if not isinstance(kubelet, dict):
        raise ValueError("it has no node.kubelet section: is it kube-bench's cfg/config.yaml?")
    for key, ours in paths.items():
        theirs = kubelet.get(key) or []
        if not isinstance(theirs, list):
            raise ValueError(f"node.kubelet.{key} is not a list")
        kubelet[key] = ours + [p for p in theirs if p not in ours]
    # What kube-bench substitutes when no candidate exists: pykubelet's, so a failing check
    # names the file to fix.
    for key, default in (("svc", "defaultsvc"), ("confs", "defaultconf"), ("cafile", "defaultcafile")):
        kubelet[default] = paths[key][0]
    if paths["kubeconfig"]:
        kubelet["defaultkubeconfig"] = paths["kubeconfig"][0]
    return base


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet kube-bench-config", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, help="kube-bench's cfg/config.yaml")
    p.add_argument("--config-dir", default="/etc/pykubelet", help="install's --config-dir (/etc/pykubelet)")
    p.add_argument("--unit-dir", default="/etc/systemd/system", help="install's --unit-dir (/etc/systemd/system)")
    p.add_argument("--kubeconfig", default="", help="the node's kubeconfig (default: install's --kubeconfig)")
    args = p.parse_args(argv)
    try:
        base = safe_yaml.load(Path(args.source).read_text())
        if not isinstance(base, dict):
            raise ValueError("not a mapping")
        kubeconfig = args.kubeconfig or installed_kubeconfig(Path(args.config_dir))
        out = merged(base, pykubelet_paths(Path(args.config_dir), Path(args.unit_dir), kubeconfig))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"pykubelet kube-bench-config: cannot use {args.source}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0
