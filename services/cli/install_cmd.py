"""`pykubelet install` and `pykubelet uninstall`: the node as systemd units.

install writes, idempotently (a second run changes nothing it does not have to):
- the units from deploy/systemd (one per service, the bus, pykubelet's own containerd and
  pykubelet.target), with this machine's paths filled in, into the unit directory;
- <config-dir>/config.yaml, a KubeletConfiguration with the kubelet's defaults and the CIS
  benchmark's worker-node settings spelled out (kept if present: it is the operator's file from
  then on), with the files it names: the client CA (<config-dir>/pki/ca.crt, from --kubeconfig's
  cluster unless --client-ca-file is given) and the kubelet API's self-signed serving certificate
  (<root-dir>/pki);
- <config-dir>/flags.env, the node flags every service gets (rewritten from install's flags);
- <config-dir>/bus/: a password per service and the NATS config that holds each to its own
  subjects, 0600 (kept if present, so running services keep working; --rotate-bus-credentials);
- <root-dir>/containerd/config.toml, pykubelet's containerd config (its own socket and state);
then reloads systemd (and enables the target with --enable).

uninstall stops and disables the target and removes all of the above; the root dir (the store,
pod directories, containerd's images) is left for `rm -rf` once the pods are gone.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from services.cli.as_kubelet import DEFAULT_KUBELET_PATH, AsKubelet, AsKubeletError, is_ours
from services.supervisor.containerd_config import ContainerdLayout, render_config
from shared.api import kubeconfig
from shared.api.self_signed import write_self_signed
from shared.bus.auth import CredentialsError, credentials_file, read_credentials, server_config, write_credentials
from shared.config.settings import ConfigError, load_kubelet_config, read_config_file
from shared.host.cni import CNI_BIN_DIR, cni_conf_dir
from shared.host.facts import kernel_refuses_negative_oom_score_adj
from shared.process.admin import SERVICES

SRC = Path(__file__).resolve().parents[2]
TEMPLATES = SRC / "deploy" / "systemd"
TARGET = "pykubelet.target"
DEFAULT_PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
SYSTEMCTL_TIMEOUT = 300


class InstallError(RuntimeError):
    """Something install needs is missing; the message says what to do."""


def tool(name: str) -> str:
    path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        raise InstallError(f"{name} is not installed (Debian: apt-get install {name}); `make deps` installs it")
    return path


def _code_paths(python: str) -> list[str]:
    return [os.path.realpath(python), os.path.realpath(SRC), os.path.realpath(python).rsplit("/bin/", 1)[0]]


def protect_home(python: str) -> str:
    """ProtectHome= for the sandboxed units: home directories hidden, unless pykubelet's code or
    interpreter lives in one (a checkout or a pyenv under /root), which then stays readable."""
    homes = ("/home/", "/root/", "/run/user/")
    return "read-only" if any(p.startswith(homes) for p in _code_paths(python)) else "yes"


def private_tmp(python: str) -> str:
    """PrivateTmp= for the sandboxed units: yes, unless pykubelet's code lives under /tmp or
    /var/tmp, which a private /tmp would hide from the service (it would not start)."""
    tmps = ("/tmp/", "/var/tmp/")
    paths = _code_paths(python) + [os.path.abspath(python)]
    return "no" if any(p.startswith(tmps) for p in paths) else "yes"


def unit_names() -> list[str]:
    return sorted(p.name for p in TEMPLATES.iterdir() if p.suffix in (".service", ".slice", ".target"))


def render_unit(name: str, values: dict[str, str]) -> str:
    text = (TEMPLATES / name).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


# The CIS Kubernetes Benchmark's strong ciphers (its check 4.2.12), in the kubelet's names.
STRONG_CIPHER_SUITES = ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]
DEFAULT_POD_PIDS_LIMIT = 4096


def default_kubelet_config(static_pod_path: str, pod_cidr: str, client_ca_file: str, tls_cert_file: str,
                           tls_private_key_file: str, cgroup_driver: str = "cgroupfs") -> str:
    """The first config.yaml: the kubelet's defaults, with what the CIS benchmark's worker-node
    checks (section 4.2) read written out, so the file says what the node does."""
    lines = ["# The node's KubeletConfiguration (kubelet.config.k8s.io/v1beta1): the kubelet's field names",
             "# and defaults. Written once by `pykubelet install`; yours to edit, then",
             "# `systemctl restart pykubelet.target`. The settings below the static pod path are the",
             "# secure ones the CIS Kubernetes Benchmark checks for (section 4.2), spelled out.",
             "apiVersion: kubelet.config.k8s.io/v1beta1",
             "kind: KubeletConfiguration",
             f"staticPodPath: {static_pod_path}"]
    if pod_cidr:
        lines.append(f"podCIDR: {pod_cidr}")
    lines += ["# How pod cgroups are made; containerd's SystemdCgroup is set to match.",
              f"cgroupDriver: {cgroup_driver}",
              "authentication:",
              "  anonymous:",
              "    enabled: false",
              "  webhook:",
              "    enabled: true"]
    if client_ca_file:
        lines += ["  x509:", f"    clientCAFile: {client_ca_file}"]
    lines += ["authorization:",
              "  mode: Webhook",
              "readOnlyPort: 0",
              f"tlsCertFile: {tls_cert_file}",
              f"tlsPrivateKeyFile: {tls_private_key_file}",
              "tlsCipherSuites:", *(f"  - {c}" for c in STRONG_CIPHER_SUITES),
              "streamingConnectionIdleTimeout: 4h0m0s",
              "eventRecordQPS: 50",
              "# A fork bomb in one pod cannot take every PID of the node.",
              f"podPidsLimit: {DEFAULT_POD_PIDS_LIMIT}",
              "# RuntimeDefault seccomp for every container that names no profile.",
              "seccompDefault: true"]
    return "\n".join(lines) + "\n"


def write_if_changed(path: Path, content: str, mode: int) -> bool:
    """Write (atomically, never through a symlink) when the content or mode differs; whether it did."""
    if path.exists() and path.read_text() == content and (os.stat(path).st_mode & 0o777) == mode:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), mode)
        f.write(content)
    os.replace(tmp, path)
    return True


class Installer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(args.root_dir)
        self.conf = Path(args.config_dir)
        self.units = Path(args.unit_dir)
        self.changed: list[str] = []

    def _write(self, path: Path, content: str, mode: int = 0o600) -> None:
        """Write when different; remember what changed for the summary. 0600: only root (systemd,
        containerd, the services) reads what is written here, as the CIS benchmark's 4.1.x checks
        want for the kubelet's unit and config files."""
        if write_if_changed(path, content, mode):
            self.changed.append(str(path))

    def values(self) -> dict[str, str]:
        return {"PYTHON": self.args.python, "SRC": str(SRC), "ROOT_DIR": str(self.root),
                "CONF_DIR": str(self.conf), "NATS_PORT": str(self.args.nats_port),
                "NATS_SERVER": tool("nats-server"), "CONTAINERD": tool("containerd"),
                "PROTECT_HOME": protect_home(self.args.python), "PRIVATE_TMP": private_tmp(self.args.python)}

    def node_flags(self) -> str:
        a = self.args
        flags = []
        for flag, value in (("--kubeconfig", a.kubeconfig), ("--hostname-override", a.hostname_override),
                            ("--node-ip", a.node_ip)):
            if value:
                flags.append(f"{flag}={value}")
        return " ".join(shlex.quote(f) for f in flags)

    def bus(self) -> None:
        bus_dir = self.conf / "bus"
        users = None
        if not self.args.rotate_bus_credentials:
            try:
                users = {s: read_credentials(credentials_file(bus_dir, s)) for s in SERVICES}
            except CredentialsError:
                users = None
        if users is None:
            users = write_credentials(bus_dir, SERVICES)
            self.changed.append(f"{bus_dir}/*.json")
        self._write(bus_dir / "nats.conf", server_config(self.args.nats_port, users), mode=0o600)

    def containerd(self, cgroup_driver: str) -> None:
        layout = ContainerdLayout(self.root / "containerd")
        self._write(layout.config, render_config(
            layout, cni_conf_dir=cni_conf_dir(self.root), cni_bin_dir=CNI_BIN_DIR,
            sandbox_image=self.args.pod_infra_container_image, registry=None,
            restrict_oom=kernel_refuses_negative_oom_score_adj(), systemd_cgroup=cgroup_driver == "systemd"))

    def cgroup_driver(self, config: Path) -> str:
        """The node's cgroup driver: what an existing config.yaml says (it is the operator's), else
        --cgroup-driver, else what the host suggests (systemd on a systemd host with cgroup v2,
        as kubeadm defaults to; cgroupfs elsewhere: on cgroup v1 the systemd driver works on a
        host systemd boots, but not where systemd runs in a container, as in systemd-nspawn)."""
        asked = getattr(self.args, "cgroup_driver", "")
        if config.exists():
            try:
                data = yaml.safe_load(config.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise InstallError(f"{config}: cannot read it ({exc}); fix or remove it") from None
            have = (data.get("cgroupDriver") if isinstance(data, dict) else None) or "cgroupfs"
            if asked and asked != have:
                raise InstallError(f"{config} says cgroupDriver: {have}, not {asked}: edit the file (it is kept "
                                   "across installs) or leave --cgroup-driver out")
            return str(have)
        if asked:
            return str(asked)
        return "systemd" if systemd_running() and Path("/sys/fs/cgroup/cgroup.controllers").exists() else "cgroupfs"

    def client_ca(self) -> str:
        """authentication.x509.clientCAFile for a new config.yaml: --client-ca-file, else the CA
        of --kubeconfig's cluster copied to <config-dir>/pki/ca.crt (a kubeadm cluster signs
        client certificates with the CA its API server's certificate chains to); "" without
        either (a standalone node: the kubelet API then takes no client certificate)."""
        if self.args.client_ca_file:
            path = Path(self.args.client_ca_file)
            if not path.is_absolute() or not path.is_file():
                raise InstallError(f"--client-ca-file {path}: not an absolute path to a file")
            return str(path)
        if not self.args.kubeconfig:
            return ""
        try:
            pem = kubeconfig.cluster_ca(Path(self.args.kubeconfig))
        except kubeconfig.KubeconfigError as exc:
            raise InstallError(f"{exc} (install reads the cluster's CA from it; or give --client-ca-file)") from None
        if pem is None:
            raise InstallError(f"--kubeconfig {self.args.kubeconfig} names no certificate-authority for its "
                               "cluster: give the CA that signs the API server's client certificates with "
                               "--client-ca-file")
        ca = self.conf / "pki" / "ca.crt"
        self._write(ca, pem.decode(), mode=0o644)  # a CA is public: 644, as CIS 4.1.7 allows
        return str(ca)

    def serving_cert(self) -> tuple[str, str]:
        """The kubelet API's self-signed certificate, where node-api would make it at its first
        start (<root-dir>/pki), made now so that tlsCertFile can name it."""
        cert, key = self.root / "pki" / "kubelet.crt", self.root / "pki" / "kubelet.key"
        if not (cert.is_file() and key.is_file()):
            name = self.args.hostname_override or socket.gethostname()
            write_self_signed(cert, key, name.lower(), [self.args.node_ip] if self.args.node_ip else [])
            self.changed.append(str(cert))
        return str(cert), str(key)

    def configure(self, kubelet_config: bool = True) -> None:
        """Everything but the units: what any way of running the services needs."""
        config = self.conf / "config.yaml"
        driver = self.cgroup_driver(config) if kubelet_config else "cgroupfs"
        if kubelet_config and not config.exists():
            ca = self.client_ca()
            cert, key = self.serving_cert()
            self._write(config, default_kubelet_config(self.args.pod_manifest_path, self.args.pod_cidr, ca,
                                                       cert, key, driver))
            Path(self.args.pod_manifest_path).mkdir(parents=True, exist_ok=True)
        self.bus()
        self.containerd(driver)

    def self_limits(self, config: Path) -> dict[str, str]:
        """The services' units carry config.yaml's oomScoreAdj and maxOpenFiles (OOMScoreAdjust=,
        LimitNOFILE=): their processes have no CAP_SYS_RESOURCE to lower the one or raise the other
        (shared/process/self_limits.py)."""
        try:
            kubelet, _ = load_kubelet_config(read_config_file(config), str(config))
        except ConfigError as exc:
            raise InstallError(f"{config}: {exc}; fix it, then run install again") from None
        return {"OOM_SCORE_ADJ": str(kubelet.oom_score_adj), "MAX_OPEN_FILES": str(kubelet.max_open_files)}

    def install(self) -> None:
        values = self.values()
        # The config first: what it cannot use (a kubeconfig, a CA) stops the install before
        # any unit is written.
        self.configure()
        values.update(self.self_limits(self.conf / "config.yaml"))
        if systemd_running():
            # Where eviction raises logind's InhibitDelayMaxSec for shutdownGracePeriod: its unit
            # may write there, and a sandbox can only open up a directory that exists.
            Path("/etc/systemd/logind.conf.d").mkdir(parents=True, exist_ok=True)
        for name in unit_names():
            self._write(self.units / name, render_unit(name, values))
        self._write(self.conf / "flags.env", "# Node flags for every pykubelet service; written by pykubelet "
                    "install.\nPYKUBELET_ARGS=" + shlex.quote(self.node_flags()) + "\n")

    def uninstall(self) -> list[str]:
        removed = []
        for name in unit_names():
            path = self.units / name
            if path.exists():
                path.unlink()
                removed.append(str(path))
        for path in (self.conf / "config.yaml", self.conf / "flags.env", self.conf / "pki" / "ca.crt",
                     self.root / "containerd" / "config.toml"):
            if path.exists():
                path.unlink()
                removed.append(str(path))
        if (self.conf / "pki").exists() and not any((self.conf / "pki").iterdir()):
            (self.conf / "pki").rmdir()
        if (self.conf / "bus").exists():
            shutil.rmtree(self.conf / "bus")
            removed.append(str(self.conf / "bus"))
        if self.conf.exists() and not any(self.conf.iterdir()):
            self.conf.rmdir()
        return removed


def systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir()


def systemctl(*args: str) -> None:
    res = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT)
    if res.returncode != 0:
        raise RuntimeError(f"systemctl {' '.join(args)} failed: {res.stderr.strip()}")


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--root-dir", default="/var/lib/pykubelet", help="the node's state (/var/lib/pykubelet)")
    p.add_argument("--config-dir", default="/etc/pykubelet", help="config, flags and bus credentials (/etc/pykubelet)")
    p.add_argument("--unit-dir", default="/etc/systemd/system", help="where units go (/etc/systemd/system)")
    return p


def install(argv: list[str]) -> int:
    if "--as-kubelet" in argv:
        return install_as_kubelet(argv)
    p = _parser("pykubelet install", "Install the node as systemd units (one per service).")
    p.add_argument("--python", default=sys.executable, help="the interpreter with pykubelet installed (this one)")
    p.add_argument("--nats-port", type=int, default=4222, help="loopback port of the bus (4222)")
    p.add_argument("--pod-manifest-path", default="/etc/kubernetes/manifests",
                   help="static pod directory for a new config.yaml (/etc/kubernetes/manifests)")
    p.add_argument("--pod-cidr", default="", help="podCIDR for a new config.yaml (standalone nodes)")
    p.add_argument("--pod-infra-container-image", default=DEFAULT_PAUSE_IMAGE,
                   help=f"the sandbox (pause) image containerd runs for each pod ({DEFAULT_PAUSE_IMAGE})")
    p.add_argument("--kubeconfig", default="", help="join a cluster with this kubeconfig")
    p.add_argument("--client-ca-file", default="",
                   help="the CA of the kubelet API's client certificates, for a new config.yaml "
                        "(default: the CA of --kubeconfig's cluster, copied to <config-dir>/pki/ca.crt)")
    p.add_argument("--hostname-override", default="", help="the node's name")
    p.add_argument("--node-ip", default="", help="the node's InternalIP")
    p.add_argument("--cgroup-driver", choices=("cgroupfs", "systemd"), default="",
                   help="cgroupDriver for a new config.yaml (default: systemd on a systemd host with cgroup v2, "
                        "else cgroupfs); containerd's config follows config.yaml's")
    p.add_argument("--rotate-bus-credentials", action="store_true", help="new bus passwords (restart the target after)")
    p.add_argument("--enable", action="store_true", help=f"also `systemctl enable {TARGET}`")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("pykubelet install: run as root (it writes units and /etc/pykubelet)", file=sys.stderr)
        return 2
    if not TEMPLATES.is_dir():
        print(f"pykubelet install: no unit templates at {TEMPLATES}; install from a checkout of pykubelet",
              file=sys.stderr)
        return 2
    inst = Installer(args)
    try:
        inst.install()
    except InstallError as exc:
        print(f"pykubelet install: {exc}", file=sys.stderr)
        return 2
    print("\n".join(f"wrote {c}" for c in inst.changed) or "nothing to change: already installed")
    if systemd_running():
        systemctl("daemon-reload")
        if args.enable:
            systemctl("enable", TARGET)
        print(f"start the node with: systemctl start {TARGET}   (logs: journalctl -u 'pykubelet-*')")
    else:
        print("systemd is not running here: the units take effect on a system booted with systemd")
    return 0


def configure(argv: list[str]) -> int:
    """The node's files without units: bus credentials and NATS config under <config-dir>/bus and
    containerd's config (docker-compose.yml's setup step runs this)."""
    p = argparse.ArgumentParser(prog="pykubelet configure", description=configure.__doc__)
    p.add_argument("--root-dir", default="/var/lib/pykubelet", help="the node's state (/var/lib/pykubelet)")
    p.add_argument("--config-dir", default="/var/lib/pykubelet",
                   help="where bus/ goes (/var/lib/pykubelet: the services' default credentials path)")
    p.add_argument("--nats-port", type=int, default=4222, help="loopback port of the bus (4222)")
    p.add_argument("--pod-infra-container-image", default=DEFAULT_PAUSE_IMAGE,
                   help=f"the sandbox (pause) image containerd runs for each pod ({DEFAULT_PAUSE_IMAGE})")
    p.add_argument("--rotate-bus-credentials", action="store_true", help="new bus passwords")
    args = p.parse_args(argv)
    inst = Installer(argparse.Namespace(**vars(args), unit_dir="", pod_manifest_path="", pod_cidr="",
                                        kubeconfig="", client_ca_file="", hostname_override="", node_ip=""))
    inst.configure(kubelet_config=False)
    print("\n".join(f"wrote {c}" for c in inst.changed) or "nothing to change: already configured")
    return 0


def _as_kubelet_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False)
    p.add_argument("--as-kubelet", action="store_true", required=True,
                   help="pykubelet as the program kubelet.service runs (kubeadm's nodes)")
    p.add_argument("--kubelet-path", default=DEFAULT_KUBELET_PATH,
                   help=f"where the kubelet binary goes ({DEFAULT_KUBELET_PATH})")
    p.add_argument("--unit-dir", default="/etc/systemd/system", help="where units go (/etc/systemd/system)")
    return p


def install_as_kubelet(argv: list[str]) -> int:
    """The kubelet binary, kubelet.service and kubeadm's drop-in (services/cli/as_kubelet.py).
    kubeadm writes the configuration; pykubelet's own units, config and bus files are not used."""
    p = _as_kubelet_parser("pykubelet install", "Install pykubelet as the kubelet kubelet.service runs "
                           "(for kubeadm join). Other install flags do not apply: kubeadm writes the config.")
    p.add_argument("--python", default=sys.executable, help="the interpreter with pykubelet installed (this one)")
    p.add_argument("--enable", action="store_true", help="also `systemctl enable kubelet.service`")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("pykubelet install: run as root (it writes the kubelet binary and units)", file=sys.stderr)
        return 2
    target = AsKubelet(Path(args.kubelet_path), Path(args.unit_dir), args.python, str(SRC))
    try:
        target.check()
    except AsKubeletError as exc:
        print(f"pykubelet install: {exc}", file=sys.stderr)
        return 2
    changed = [str(path) for path, (content, mode) in target.files().items() if write_if_changed(path, content, mode)]
    print("\n".join([f"wrote {c}" for c in changed] + [f"kept {k}" for k in target.kept])
          or "nothing to change: already installed")
    if systemd_running():
        systemctl("daemon-reload")
        if args.enable:
            systemctl("enable", "kubelet.service")
    print("join a cluster with `kubeadm join ...`: it writes the kubelet's config and starts kubelet.service "
          "(logs: journalctl -u kubelet)")
    return 0


def uninstall(argv: list[str]) -> int:
    if "--as-kubelet" in argv:
        return uninstall_as_kubelet(argv)
    p = _parser("pykubelet uninstall", "Stop the node's units and remove what `pykubelet install` wrote.")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("pykubelet uninstall: run as root", file=sys.stderr)
        return 2
    inst = Installer(args)
    if systemd_running() and (inst.units / TARGET).exists():
        systemctl("disable", "--now", TARGET)
    removed = inst.uninstall()
    if systemd_running():
        systemctl("daemon-reload")
    print("\n".join(f"removed {r}" for r in removed) or "nothing to remove: not installed")
    print(f"the node's state is left in {args.root_dir}")
    return 0


def uninstall_as_kubelet(argv: list[str]) -> int:
    p = _as_kubelet_parser("pykubelet uninstall", "Stop kubelet.service and remove what "
                           "`pykubelet install --as-kubelet` wrote (kubeadm's files stay: `kubeadm reset` removes them).")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("pykubelet uninstall: run as root", file=sys.stderr)
        return 2
    target = AsKubelet(Path(args.kubelet_path), Path(args.unit_dir), sys.executable, str(SRC))
    if systemd_running() and is_ours(Path(args.kubelet_path)):
        systemctl("disable", "--now", "kubelet.service")
    removed = target.remove()
    if systemd_running():
        systemctl("daemon-reload")
    print("\n".join(f"removed {r}" for r in removed) or "nothing to remove: not installed as the kubelet")
    return 0
