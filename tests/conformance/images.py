"""The images the [NodeConformance] specs pull, built locally and pushed to the node's registry.

The specs name their images through registries (test/utils/image/manifest.go) that
KUBE_TEST_REPO_LIST can point anywhere; these machines reach no public registry, so every
registry the node specs use becomes a path in the local one. agnhost and nonewprivs' nnp are
the real binaries built from the same source tree as e2e.test (Entrypoint, Cmd and modes as
upstream's Dockerfiles); busybox (and nonroot, the same as user 1234) is busybox 1.37 built from upstream's
source (deploy/build-busybox.sh: Debian's drops environment variables the specs set), and so is
glibc-dns-testing, whose `hostname -f` the specs call; nginx is a stand-in serving HTTP on port 80. The Alpine
tools of upstream's agnhost image that the specs call have stand-ins: curl (busybox wget) and nc
with -u (tests/conformance/nc, a static Go binary).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from shared.runtime.images.build import ImageSpec, build_image, busybox_applets
from shared.runtime.images.registry import push_image
from tests.cluster.harness import CACHE, KUBE_BIN, KUBE_VERSION

# Upstream's busybox, as in upstream's images (deploy/build-busybox.sh builds it).
BUSYBOX = CACHE / "busybox-1.37.0" / "busybox"
# The source tree deploy/build-kube.sh builds e2e.test from: the kitten image's own files.
KUBE_SRC = CACHE / "src" / f"kubernetes-{KUBE_VERSION}"

# registry key in KUBE_TEST_REPO_LIST -> path under the local registry. invalidRegistry and
# privateRegistry stay as upstream has them: the specs that use them expect the pull to fail.
REGISTRIES = {
    "dockerLibraryRegistry": "library",
    "promoterE2eRegistry": "e2e-test-images",
    "gcRegistry": "k8s-gcr",
    "gcEtcdRegistry": "k8s-gcr",
    "buildImageRegistry": "build-image",
    "sigStorageRegistry": "sig-storage",
    "cloudProviderGcpRegistry": "cloud-provider-gcp",
}

# busybox httpd as PID 1 would ignore SIGTERM: every stop would wait out the grace period.
_HTTPD = ["/bin/sh", "-c", "httpd -f -p 80 -h /www & trap 'kill $!; exit 0' TERM INT; wait $!"]
_INDEX = {"www/index.html": "<html><body><h1>It works!</h1></body></html>\n"}
# busybox's own sh runs its applets before anything on PATH (its nc has no -u): the agnhost
# stand-in's /bin/sh is Debian's dash, with the two libraries it links.
_DASH = {"bin/sh": Path("/bin/dash"), "lib/x86_64-linux-gnu/libc.so.6": Path("/lib/x86_64-linux-gnu/libc.so.6"),
         "lib64/ld-linux-x86-64.so.2": Path("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")}

# Upstream's agnhost image is Alpine with curl; the specs run `curl [-g -q -s] [--max-time N]
# [--connect-timeout N] URL` in it (lifecycle hooks, pod networking). busybox's wget does the GET.
_CURL = """#!/bin/sh
# curl stand-in for the e2e specs: GET one URL, print the body, fail when the request fails
url="" timeout=""
while [ $# -gt 0 ]; do
  case "$1" in
    --max-time|-m|--connect-timeout) timeout="$2"; shift ;;
    -*) ;;
    *) url="$1" ;;
  esac
  shift
done
# (busybox wget -T crashes in Debian's static build: timeout(1) bounds it instead)
exec timeout "${timeout:-120}" wget -q -O - "$url"
"""


# Upstream's kitten image is its agnhost image (Alpine) with the two files of
# test/images/kitten/html; the image volume spec mounts it and reads data.json and the base's
# /etc/os-release, which names Alpine Linux.
_ALPINE_OS_RELEASE = """NAME="Alpine Linux"
ID=alpine
PRETTY_NAME="Alpine Linux (the kitten image's base, as the e2e specs read it)"
"""


def kitten_image(agnhost: ImageSpec, src: Path = KUBE_SRC) -> ImageSpec:
    html = src / "test" / "images" / "kitten" / "html"
    return ImageSpec("e2e-test-images/kitten", "1.8", agnhost.cmd, entrypoint=agnhost.entrypoint,
                     # Read when the image is built: the source tree may still be on its way.
                     binaries={**agnhost.binaries, "kitten.jpg": html / "kitten.jpg", "data.json": html / "data.json"},
                     symlinks=agnhost.symlinks, dirs=agnhost.dirs,
                     files={**agnhost.files, "etc/os-release": _ALPINE_OS_RELEASE},
                     modes={**agnhost.modes, "kitten.jpg": 0o644, "data.json": 0o644})


def image_specs(agnhost: Path, nnp: Path, nc: Path, busybox: Path = BUSYBOX) -> list[ImageSpec]:
    """The images of e2e.test 1.37 (test/utils/image/manifest.go) that the node's specs run."""
    specs = _image_specs(agnhost, nnp, nc)
    for spec in specs:
        spec.busybox = busybox
    return specs


def _image_specs(agnhost: Path, nnp: Path, nc: Path) -> list[ImageSpec]:
    def agnhost_image(tag: str) -> ImageSpec:
        return ImageSpec("e2e-test-images/agnhost", tag, ["pause"], entrypoint=["/agnhost"],
                         binaries={"agnhost": agnhost, "bin/nc": nc, **_DASH}, symlinks={"agnhost-2": "agnhost"},
                         dirs=["uploads"], files={"usr/bin/curl": _CURL}, modes={"usr/bin/curl": 0o755})

    agnhost_latest = agnhost_image("2.66.1")
    return [
        # Prints its effective uid; setuid root, so only no_new_privs keeps a non-root user so.
        ImageSpec("e2e-test-images/nonewprivs", "1.4", ["nnp"], binaries={"usr/local/bin/nnp": nnp},
                  modes={"usr/local/bin/nnp": 0o4755},
                  env=["PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin"]),
        agnhost_latest,
        agnhost_image("2.55"),
        kitten_image(agnhost_latest),
        ImageSpec("e2e-test-images/busybox", "1.37.0-2", ["sh"]),
        # busybox with USER 1234, as upstream's nonroot image.
        ImageSpec("e2e-test-images/nonroot", "1.5", ["sh"], user="1234"),
        # Upstream's is Debian with dnsutils; the specs that run it (hostnameOverride) print
        # `hostname` and `hostname -f`, which busybox's applets answer from the pod's /etc/hosts
        # as glibc's do.
        ImageSpec("e2e-test-images/glibc-dns-testing", "2.1.1", ["sh"]),
        *(ImageSpec("e2e-test-images/nginx", tag, _HTTPD, files=_INDEX) for tag in ("1.27.0-2", "1.28.0-2")),
        ImageSpec("k8s-gcr/pause", "3.10.2",
                  ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]),
    ]


def push_all(registry: str) -> list[str]:
    """Build and push every image; return their references."""
    agnhost, nnp, nc = KUBE_BIN / "agnhost", KUBE_BIN / "nonewprivs", KUBE_BIN / "nc"
    for binary in (agnhost, nnp, nc):
        if not binary.exists():
            raise FileNotFoundError(f"{binary} missing: run `deploy/build-kube.sh e2e`")
    applets = busybox_applets(BUSYBOX)
    return [push_image(registry, build_image(spec, applets)) for spec in image_specs(agnhost, nnp, nc)]


def write_repo_list(path: Path, registry: str) -> Path:
    """KUBE_TEST_REPO_LIST: every registry the specs use, pointed at the local one."""
    path.write_text(yaml.safe_dump({key: f"{registry}/{sub}" for key, sub in REGISTRIES.items()}))
    return path
