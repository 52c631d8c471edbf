#!/usr/bin/env bash
# Build Kubernetes $KUBE_VERSION (default 1.37.2) from the Go module proxy, once, into
# $PYKUBELET_CACHE/kube-$KUBE_VERSION/bin (default /var/cache/pykubelet), outside the checkout.
#
#   build-kube.sh [kube]   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
#                          etcd: the control plane of the cluster and multinode tests (make test)
#   build-kube.sh kubelet  the reference kubelet of `make bench` and `make conformance`
#   build-kube.sh kubeadm  kubeadm, whose printed defaults are what a joined node's config holds
#   build-kube.sh e2e      e2e.test, ginkgo and the test-image binaries (agnhost, nonewprivs, nc)
#                          of `make conformance`
#
# No Kubernetes binaries are published in the registries these machines reach, but the proxy
# serves the k8s.io/kubernetes module. Its zip has no staging/ tree (each staging directory is a
# module of its own, published as k8s.io/X v0.MINOR.PATCH), so the module's `./staging` replace
# directives are swapped for requires of the published versions. Compiling the control plane on 2
# cores takes about 20 minutes the first time; the module and build caches stay under the cache
# dir, so later runs take seconds. etcd is built from the same tree (the etcd server module the
# apiserver's client is pinned to): Debian's etcd 3.4 is older than what the apiserver supports.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.37.2}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
BIN=$CACHE/kube-$KUBE_VERSION/bin
SET=${1:-kube}
REPO=$(cd "$(dirname "$0")/.." && pwd)
case "$SET" in
  kube) PKGS=(./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubectl ./cmd/pykubelet-etcd)
        TARGETS=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd) ;;
  kubelet) PKGS=(./cmd/kubelet); TARGETS=(kubelet) ;;
  kubeadm) PKGS=(./cmd/kubeadm); TARGETS=(kubeadm) ;;
  e2e) PKGS=(./test/images/agnhost ./test/images/nonewprivs github.com/onsi/ginkgo/v2/ginkgo)
       TARGETS=(agnhost nonewprivs ginkgo e2e.test nc) ;;
  *) echo "usage: $0 [kube|kubelet|kubeadm|e2e]" >&2; exit 2 ;;
esac

have_all() {
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}
if have_all; then
  echo "$SET: cached binaries in $BIN"
  exit 0
fi

GO=$(command -v go || true)
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
if [ -z "$GO" ]; then
  echo "kube: no Go toolchain found (PATH, /usr/local/go/bin): Kubernetes $KUBE_VERSION needs Go 1.26 or newer" >&2
  exit 1
fi

mkdir -p "$CACHE"
# Two `make` runs at once share one build: the second waits for the first, then finds the binaries.
exec 9>"$CACHE/build-kube.lock"
if ! flock -n 9; then
  echo "$SET: another build holds $CACHE/build-kube.lock; waiting for it"
  flock 9
  if have_all; then echo "$SET: cached binaries in $BIN"; exit 0; fi
fi

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gocache
export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0
export HOME=${HOME:-/root}

minor=${KUBE_VERSION#*.}; minor=${minor%%.*}
patch=${KUBE_VERSION##*.}
staging_version=v0.$minor.$patch
SRC=$CACHE/src/kubernetes-$KUBE_VERSION
if [ ! -f "$SRC/.pykubelet-prepared" ]; then
  echo "kube: fetching k8s.io/kubernetes@v$KUBE_VERSION from the module proxy"
  dir=$("$GO" mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "kube: the module proxy gave no k8s.io/kubernetes@v$KUBE_VERSION" >&2; exit 1; }
  rm -rf "$SRC"
  mkdir -p "$(dirname "$SRC")"
  cp -r "$dir" "$SRC"
  chmod -R u+w "$SRC"
  cd "$SRC"
  edits=()
  required=$("$GO" mod edit -json | python3 -c 'import json,sys; print("\n".join(r["Path"] for r in json.load(sys.stdin).get("Require") or []))')
  for mod in $("$GO" mod edit -json | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith("./staging/"):
        print(r["Old"]["Path"])'); do
    edits+=("-dropreplace=$mod")
    # Only modules the tree requires are pinned; sample-* modules are replaced but not required,
    # and the proxy does not serve all of them.
    if grep -qx "$mod" <<<"$required"; then edits+=("-require=$mod@$staging_version"); fi
  done
  "$GO" mod edit "${edits[@]}"
  # go.work points at the missing staging directories too.
  rm -f go.work go.work.sum
  # etcd's server as a command of this tree, so it is the version the apiserver's client is
  # pinned to and needs no module of its own.
  mkdir -p cmd/pykubelet-etcd
  printf '%s\n' 'package main' '' 'import (' '	"os"' '' '	"go.etcd.io/etcd/server/v3/etcdmain"' ')' '' \
    'func main() { etcdmain.Main(os.Args) }' > cmd/pykubelet-etcd/main.go
  echo "kube: resolving dependencies"
  "$GO" mod download
  touch .pykubelet-prepared
fi
cd "$SRC"

build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

mkdir -p "$BIN"
echo "$SET: compiling ${TARGETS[*]} (about 20 minutes for the control plane on 2 cores the first time)"
start=$(date +%s)
# Progress: go prints each package as it is compiled with -v; a count every 30 s is enough.
log=$CACHE/build-kube-$SET.log
: >"$log"
( while sleep 30; do echo "$SET: $(( $(date +%s) - start ))s, $(wc -l <"$log") packages compiled"; done ) &
ticker=$!
trap 'kill $ticker 2>/dev/null || true' EXIT
build() {  # output, packages...
  local out=$1; shift
  if ! "$GO" build -v -trimpath -ldflags "$ldflags" -o "$out" "$@" 2>>"$log"; then
    tail -n 40 "$log" >&2
    echo "kube: building $* failed (log: $log)" >&2
    exit 1
  fi
}
tmp=$BIN/.tmp-$SET
rm -rf "$tmp"; mkdir -p "$tmp"
build "$tmp/" "${PKGS[@]}"
if [ "$SET" = kube ]; then mv "$tmp/pykubelet-etcd" "$tmp/etcd"; fi
if [ "$SET" = e2e ]; then
  if ! "$GO" test -c -v -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" ./test/e2e 2>>"$log"; then
    tail -n 40 "$log" >&2; echo "kube: building e2e.test failed (log: $log)" >&2; exit 1
  fi
  # The e2e images' netcat: built from this checkout, not the kube tree.
  (cd "$REPO/tests/conformance/nc" && GO111MODULE=off GOFLAGS= "$GO" build -o "$tmp/nc" nc.go)
fi
for t in "${TARGETS[@]}"; do install -m 0755 "$tmp/$t" "$BIN/$t"; done
rm -rf "$tmp"
echo "$SET: built in $(( $(date +%s) - start ))s into $BIN ($("$BIN/${TARGETS[0]}" --version 2>/dev/null | head -n1 || true))"
