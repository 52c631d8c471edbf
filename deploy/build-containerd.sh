#!/usr/bin/env bash
# Build containerd $CONTAINERD_VERSION (default 2.4.2) and runc $RUNC_VERSION (default 1.5.3)
# from the Go module proxy, once, into $PYKUBELET_CACHE/containerd-$CONTAINERD_VERSION/bin.
#
# The kubelet 1.36 and newer needs containerd 2.x, and Debian bookworm ships 1.6.20, so `make
# bench` and `make conformance` run both agents on this build (pykubelet finds the containerd
# and runc first on its PATH; bench/ and tests/conformance/ put this directory first). pykubelet's
# own tests keep Debian's containerd 1.6, which it supports too. Prints the directory last.
set -euo pipefail

CONTAINERD_VERSION=${CONTAINERD_VERSION:-2.4.2}
RUNC_VERSION=${RUNC_VERSION:-1.5.3}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
BIN=$CACHE/containerd-$CONTAINERD_VERSION/bin
TARGETS=(containerd containerd-shim-runc-v2 ctr runc)

have_all() {
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}
if have_all; then
  echo "containerd: cached binaries in $BIN" >&2
  echo "$BIN"
  exit 0
fi

GO=$(command -v go || true)
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
if [ -z "$GO" ]; then
  echo "containerd: no Go toolchain found (PATH, /usr/local/go/bin): containerd $CONTAINERD_VERSION needs Go 1.26 or newer" >&2
  exit 1
fi
# runc's seccomp support is cgo against libseccomp: without it no pod's seccomp profile applies.
if ! dpkg-query -W -f='${Status}' libseccomp-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "containerd: installing libseccomp-dev (runc's seccomp support)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libseccomp-dev gcc pkg-config >&2
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/build-containerd.lock"
flock 9
if have_all; then echo "$BIN"; exit 0; fi

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gocache
export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local
export HOME=${HOME:-/root}

module_dir() {  # module@version -> a writable copy of its source under $CACHE/src
  local copy=$CACHE/src/${1//\//_}
  if [ ! -d "$copy" ]; then
    local dir
    dir=$("$GO" mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || { echo "containerd: the module proxy gave no $1" >&2; exit 1; }
    mkdir -p "$CACHE/src"
    cp -r "$dir" "$copy.tmp" && chmod -R u+w "$copy.tmp" && mv "$copy.tmp" "$copy"
  fi
  echo "$copy"
}

start=$(date +%s)
tmp=$BIN/.tmp
rm -rf "$tmp"; mkdir -p "$tmp"
echo "containerd: compiling containerd $CONTAINERD_VERSION (a few minutes the first time)" >&2
src=$(module_dir "github.com/containerd/containerd/v2@v$CONTAINERD_VERSION")
(cd "$src" && CGO_ENABLED=0 "$GO" build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" \
  -o "$tmp/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr) >&2
echo "containerd: compiling runc $RUNC_VERSION" >&2
src=$(module_dir "github.com/opencontainers/runc@v$RUNC_VERSION")
# Without the libpathrs tag (a Rust library Debian does not ship), runc uses its Go fallback.
(cd "$src" && CGO_ENABLED=1 "$GO" build -trimpath -tags "seccomp urfave_cli_no_docs" \
  -ldflags "-s -w -X main.version=$RUNC_VERSION" -o "$tmp/runc" .) >&2
for t in "${TARGETS[@]}"; do install -m 0755 "$tmp/$t" "$BIN/$t"; done
rm -rf "$tmp"
echo "containerd: built in $(( $(date +%s) - start ))s into $BIN ($("$BIN/containerd" --version))" >&2
echo "$BIN"
