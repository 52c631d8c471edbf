"""Assembling OCI images (layer, config, manifest) deterministically from busybox-static."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from shared.host.facts import arch

BUSYBOX = Path("/bin/busybox")

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"

WEB_INDEX = """<!doctype html>
<html><head><title>pykubelet demo</title></head>
<body><h1>Hello from a pykubelet pod</h1>
<p>This page is served by busybox httpd inside a container that pykubelet started through CRI.</p>
</body></html>
"""


@dataclass
class ImageSpec:
    """What goes into one image: extra files on top of busybox, and the config."""

    repository: str
    tag: str
    cmd: list[str]
    files: dict[str, str] = field(default_factory=dict)  # path in image -> content
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/sbin:/usr/bin:/usr/sbin"])
    workdir: str = "/"
    entrypoint: list[str] | None = None
    binaries: dict[str, Path] = field(default_factory=dict)  # path in image -> executable on the host
    symlinks: dict[str, str] = field(default_factory=dict)  # path in image -> target
    dirs: list[str] = field(default_factory=list)  # extra empty directories (0755)
    modes: dict[str, int] = field(default_factory=dict)  # path in image -> mode other than 0644/0755
    user: str = ""  # the image config's User ("" runs as root)
    busybox: Path = BUSYBOX  # the busybox-static binary the image's applets come from


# The images pykubelet's demo, tests and sandboxes use.
IMAGES = {
    "pause": ImageSpec("pykubelet/pause", "3.9", ["/bin/sh", "-c", PAUSE_SCRIPT]),
    "busybox": ImageSpec("pykubelet/busybox", "1.36", ["sh"]),
    # httpd as PID 1 would ignore SIGTERM and every stop would wait out the grace period.
    "web": ImageSpec("pykubelet/web", "1.0",
                     ["/bin/sh", "-c", "httpd -f -v -p 80 -h /www & trap 'kill $!; exit 0' TERM INT; wait $!"],
                     files={"www/index.html": WEB_INDEX}),
}


@dataclass
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict[str, str | int]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


@dataclass
class BuiltImage:
    spec: ImageSpec
    manifest: Blob
    config: Blob
    layers: list[Blob]


def busybox_applets(busybox: Path = BUSYBOX) -> list[str]:
    if not busybox.exists():
        raise FileNotFoundError(
            f"{busybox} not found: " + ("install Debian's busybox-static (make deps does this)" if busybox == BUSYBOX
                                        else "build it (deploy/build-busybox.sh)"))
    out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True, timeout=10)
    return sorted(a for a in out.stdout.split() if a and a != "busybox")


def _add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, mode: int = 0o644,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0  # deterministic: the same input always gives the same digest
    info.mode = mode
    info.type = kind
    info.linkname = link
    info.uid = info.gid = 0
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def build_layer(spec: ImageSpec, applets: list[str]) -> tuple[bytes, bytes]:
    """Return the layer tar (for its diff ID) and its gzip (what is pushed)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("root", 0o700),
                        ("proc", 0o755), ("sys", 0o755), ("dev", 0o755), ("var", 0o755)):
            _add(tar, d, mode=mode, kind=tarfile.DIRTYPE)
        _add(tar, "bin/busybox", data=spec.busybox.read_bytes(), mode=0o755)
        for applet in applets:
            if f"bin/{applet}" not in spec.binaries:  # a real binary replaces the applet
                _add(tar, f"bin/{applet}", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        _add(tar, "etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        _add(tar, "etc/group", data=b"root:x:0:\nnogroup:x:65534:\n")
        dirs_done: set[str] = {"bin", "etc", "tmp", "root", "proc", "sys", "dev", "var"}

        def parents(path: str) -> None:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs_done:
                    _add(tar, d, mode=0o755, kind=tarfile.DIRTYPE)
                    dirs_done.add(d)

        for d in sorted(spec.dirs):
            parents(f"{d}/.")
        for path, content in sorted(spec.files.items()):
            parents(path)
            _add(tar, path, data=content.encode(), mode=spec.modes.get(path, 0o644))
        for path, host in sorted(spec.binaries.items()):
            parents(path)
            _add(tar, path, data=Path(host).read_bytes(), mode=spec.modes.get(path, 0o755))
        for path, target in sorted(spec.symlinks.items()):
            parents(path)
            _add(tar, path, kind=tarfile.SYMTYPE, link=target, mode=0o777)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return raw.getvalue(), out.getvalue()


def build_image(spec: ImageSpec, applets: list[str] | None = None) -> BuiltImage:
    uncompressed, compressed = build_layer(spec, applets if applets is not None else busybox_applets(spec.busybox))
    layer = Blob(MEDIA_LAYER, compressed)
    config = {
        "architecture": arch(),
        "os": "linux",
        "config": {"Cmd": spec.cmd, "Env": spec.env, "WorkingDir": spec.workdir,
                   **({"Entrypoint": spec.entrypoint} if spec.entrypoint else {}),
                   **({"User": spec.user} if spec.user else {})},
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(uncompressed).hexdigest()]},
        "history": [{"created_by": "pykubelet image builder (busybox-static)"}],
    }
    config_blob = Blob(MEDIA_CONFIG, json.dumps(config, sort_keys=True).encode())
    manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_blob.descriptor(),
                "layers": [layer.descriptor()]}
    return BuiltImage(spec, Blob(MEDIA_MANIFEST, json.dumps(manifest, sort_keys=True).encode()),
                      config_blob, [layer])

