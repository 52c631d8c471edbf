#!/usr/bin/env bash
# Build kube-bench $KUBE_BENCH_VERSION (default 0.16.0, the newest the module proxy serves here)
# from the Go module proxy, once, into $PYKUBELET_CACHE/kube-bench-$KUBE_BENCH_VERSION: bin/kube-bench
# and cfg/, the benchmark definitions of the same release (kube-bench reads them at run time).
#
# tests/deploy/test_kube_bench.py runs it against a node `pykubelet install` set up. `go install
# module@version` refuses this module (its go.mod has replace directives), so it is built inside
# a copy of the module's source. Prints the directory last.
set -euo pipefail

KUBE_BENCH_VERSION=${KUBE_BENCH_VERSION:-0.16.0}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
OUT=$CACHE/kube-bench-$KUBE_BENCH_VERSION
MODULE=github.com/aquasecurity/kube-bench@v$KUBE_BENCH_VERSION

built() { [ -x "$OUT/bin/kube-bench" ] && [ -f "$OUT/cfg/config.yaml" ]; }
if built; then
  echo "kube-bench: cached in $OUT" >&2
  echo "$OUT"
  exit 0
fi
# KUBE_BENCH_CHECK_ONLY=1: only say (exit 1) that it is not built yet.
[ -z "${KUBE_BENCH_CHECK_ONLY:-}" ] || exit 1

GO=$(command -v go || true)
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
if [ -z "$GO" ]; then
  echo "kube-bench: no Go toolchain found (PATH, /usr/local/go/bin): kube-bench $KUBE_BENCH_VERSION needs Go" >&2
  exit 1
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/build-kube-bench.lock"
flock 9
if built; then echo "$OUT"; exit 0; fi

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gocache
export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN=local
export HOME=${HOME:-/root}

start=$(date +%s)
copy=$CACHE/src/${MODULE//\//_}
if [ ! -d "$copy" ]; then
  echo "kube-bench: downloading $MODULE" >&2
  dir=$("$GO" mod download -json "$MODULE" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "kube-bench: the module proxy gave no $MODULE" >&2; exit 1; }
  mkdir -p "$CACHE/src"
  rm -rf "$copy.tmp"
  cp -r "$dir" "$copy.tmp" && chmod -R u+w "$copy.tmp" && mv "$copy.tmp" "$copy"
fi
echo "kube-bench: compiling kube-bench $KUBE_BENCH_VERSION (a minute or two the first time)" >&2
tmp=$OUT.tmp
rm -rf "$tmp"; mkdir -p "$tmp/bin"
(cd "$copy" && CGO_ENABLED=0 "$GO" build -trimpath \
  -ldflags "-s -w -X github.com/aquasecurity/kube-bench/cmd.KubeBenchVersion=v$KUBE_BENCH_VERSION" \
  -o "$tmp/bin/kube-bench" .) >&2
cp -r "$copy/cfg" "$tmp/cfg"
rm -rf "$OUT"
mv "$tmp" "$OUT"
echo "kube-bench: built in $(( $(date +%s) - start ))s into $OUT" >&2
echo "$OUT"
