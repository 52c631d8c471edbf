#!/usr/bin/env bash
# Build kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kubectl 1.20 from
# Debian's kubernetes source package, once. `build-kube.sh e2e` builds, from the same tree, what
# `make conformance` needs besides: the upstream e2e suite (e2e.test), its parallel runner
# (ginkgo) and its test-image binaries (agnhost, nonewprivs).
#
# No Kubernetes binaries are published in the package registries these machines reach, but the
# Debian source package carries the whole tree with vendor/. The binaries are cached outside the
# checkout ($PYKUBELET_CACHE, default /var/cache/pykubelet), so only the first run pays the
# 10-20 minutes of compiling on 2 cores. Cluster tests use kube-apiserver (+ Debian's etcd) and
# kubectl, the multi-node test a whole control plane; benchmarks use the real kubelet as a baseline.
set -euo pipefail

CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
BIN=$CACHE/kube-1.20/bin
SET=${1:-kube}
case "$SET" in
  kube) PKGS=(cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubelet cmd/kubectl) ;;
  e2e) PKGS=(test/e2e/e2e.test test/images/agnhost test/images/nonewprivs vendor/github.com/onsi/ginkgo/ginkgo) ;;
  *) echo "usage: $0 [kube|e2e]" >&2; exit 2 ;;
esac
TARGETS=()
for p in "${PKGS[@]}"; do TARGETS+=("$(basename "$p")"); done
# The e2e images' netcat (tests/conformance/nc): built from this checkout, not the kube tree.
REPO=$(cd "$(dirname "$0")/.." && pwd)
if [ "$SET" = e2e ]; then TARGETS+=(nc); fi

have_all() {
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
  command -v etcd >/dev/null  # the cluster tests' store, from Debian's etcd-server
}

if have_all; then
  echo "$SET: cached binaries in $BIN"
  exit 0
fi
built=1
for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || built=0; done
if [ "$built" = 1 ]; then
  echo "$SET: installing etcd-server"
  apt-get install -y -q --no-install-recommends etcd-server
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "kube: building needs root (apt-get); run as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
SRC_LIST=/etc/apt/sources.list.d/pykubelet-deb-src.sources
if [ ! -f "$SRC_LIST" ]; then
  echo "kube: adding a deb-src entry for bookworm main ($SRC_LIST)"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$SRC_LIST"
  apt-get update -q
fi
need=()
for pkg in golang-go dpkg-dev etcd-server rsync; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "kube: installing ${need[*]}"
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi

mkdir -p "$CACHE/src"
cd "$CACHE/src"
tree=$(find . -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n1)
if [ -z "$tree" ]; then
  echo "kube: fetching Debian's kubernetes source package (about 35 MB)"
  apt-get source -q kubernetes
  tree=$(find . -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n1)
fi
cd "$tree"

# The package's own recipe (debian/rules): GOPATH inside the tree, no cgo, Debian's Go.
export GOPATH=$PWD/.go
export PATH=/usr/lib/go/bin:$PATH
export CGO_ENABLED=0
export HOME=${HOME:-/root}
mkdir -p .go/src/k8s.io
[ -L .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes

echo "$SET: compiling ${TARGETS[*]} (10-20 minutes on 2 cores the first time; progress below)"
start=$(date +%s)
make WHAT="${PKGS[*]}"
mkdir -p "$BIN"
for p in "${PKGS[@]}"; do
  t=$(basename "$p")
  install -m 0755 "_output/bin/$t" "$BIN/$t"
done
if [ "$SET" = e2e ]; then
  (cd "$REPO/tests/conformance/nc" && GO111MODULE=off go build -o "$BIN/nc" nc.go)
fi
echo "$SET: built in $(( $(date +%s) - start ))s into $BIN"
