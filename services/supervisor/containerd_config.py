"""containerd configuration owned by pykubelet: its own socket, root and state, our CNI dirs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.host.node_dirs import traversable_dir


@dataclass
class ContainerdLayout:
    base: Path  # <root-dir>/containerd

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def socket(self) -> Path:
        return self.base / "containerd.sock"

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"


def render_config(layout: ContainerdLayout, cni_conf_dir: Path, cni_bin_dir: str, sandbox_image: str,
                  registry: str | None, restrict_oom: bool, systemd_cgroup: bool = False) -> str:
    """containerd's config for a pykubelet node. systemd_cgroup: runc makes container cgroups as
    systemd scopes below the pod's slice, which the systemd cgroup driver needs (a runtime on the
    other driver would put them where systemd does not look)."""
    mirror = ""
    if registry:
        mirror = (f'  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."{registry}"]\n'
                  f'    endpoint = ["http://{registry}"]\n')
    return f"""# Written by pykubelet; regenerated on every start.
version = 2
root = "{layout.root}"
state = "{layout.state}"

[grpc]
  address = "{layout.socket}"

[ttrpc]
  address = "{layout.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.base / 'opt'}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = {str(restrict_oom).lower()}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = {str(systemd_cgroup).lower()}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{cni_conf_dir}"
{mirror}"""


def write_config(layout: ContainerdLayout, **kwargs: Any) -> Path:
    # 0711, as containerd keeps its own: a user-namespaced container's root passes through here
    # to its rootfs (state/.../rootfs).
    traversable_dir(layout.base, "pykubelet's containerd dir")
    layout.config.write_text(render_config(layout, **kwargs))
    return layout.config
