#!/usr/bin/env bash
# Build busybox $BUSYBOX_VERSION (default 1.37.0) from its upstream source, static, with
# upstream's default configuration, once, into $PYKUBELET_CACHE/busybox-$BUSYBOX_VERSION/busybox:
# the busybox of the conformance images (tests/conformance/images.py). Prints the path last.
#
# The e2e specs run upstream's busybox 1.37 image. Debian's busybox-static (1.35 in bookworm,
# 1.37 in trixie) patches ash to drop from its environment every variable whose name is not a
# shell identifier (`data-1`, which the ConfigMap and Secret envFrom specs use since 1.34), so
# those specs would fail on the image whatever the node does; upstream's ash keeps them. The
# source is Debian's copy of the upstream tarball, checked against the SHA256 of Debian's index.
set -euo pipefail

BUSYBOX_VERSION=${BUSYBOX_VERSION:-1.37.0}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${BUSYBOX_SUITE:-trixie}
CACHE=${PYKUBELET_CACHE:-/var/cache/pykubelet}
DIR=$CACHE/busybox-$BUSYBOX_VERSION
OUT=$DIR/busybox

if [ -x "$OUT" ]; then
  echo "busybox: cached $OUT" >&2
  echo "$OUT"
  exit 0
fi
mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock 9
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi

tarball=busybox_$BUSYBOX_VERSION.orig.tar.bz2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "busybox: looking up $tarball in Debian $SUITE's source index ($MIRROR)" >&2
if ! curl -fsS --retry 3 -m 120 -o "$tmp/Sources.xz" "$MIRROR/dists/$SUITE/main/source/Sources.xz"; then
  echo "busybox: cannot read Debian's $SUITE source index from $MIRROR; set DEBIAN_MIRROR to a mirror this machine reaches" >&2
  exit 1
fi
entry=$(xz -dc "$tmp/Sources.xz" | awk '/^Package: busybox$/,/^$/')
dir=$(sed -n 's/^Directory: //p' <<<"$entry")
# The Checksums-Sha256 lines are " <sha256> <size> <file>".
sum=$(awk -v f="$tarball" '/^Checksums-Sha256:/{on=1; next} /^[^ ]/{on=0} on && $3==f {print $1}' <<<"$entry")
if [ -z "$dir" ] || [ -z "$sum" ]; then
  echo "busybox: Debian $SUITE has no $tarball; set BUSYBOX_SUITE to a suite with busybox $BUSYBOX_VERSION" >&2
  exit 1
fi
echo "busybox: downloading $dir/$tarball" >&2
curl -fsS --retry 3 -m 300 -o "$tmp/$tarball" "$MIRROR/$dir/$tarball"
echo "$sum  $tmp/$tarball" | sha256sum -c --quiet - >&2 || {
  echo "busybox: $tarball does not match the SHA256 of Debian's index; not using it" >&2; exit 1; }
tar -xjf "$tmp/$tarball" -C "$tmp"
src=$tmp/busybox-$BUSYBOX_VERSION
echo "busybox: building $BUSYBOX_VERSION (defconfig, static; about 2 minutes on 2 cores)" >&2
make -s -C "$src" defconfig >/dev/null
# Static, as upstream's image runs it; tc does not build against today's kernel headers (CBQ is gone).
sed -i 's/^# CONFIG_STATIC is not set/CONFIG_STATIC=y/; s/^CONFIG_TC=y/# CONFIG_TC is not set/' "$src/.config"
if ! make -C "$src" -j"$(nproc)" busybox >"$tmp/build.log" 2>&1; then
  tail -20 "$tmp/build.log" >&2
  echo "busybox: the build failed (log above); it needs gcc, make and libc6-dev" >&2
  exit 1
fi
# The first line of its help ("BusyBox v1.37.0 (...) multi-call binary."); read whole, not
# through head, which would end busybox with SIGPIPE (a failure under pipefail).
banner=$("$src/busybox" --help 2>&1 || true)
banner=${banner%%$'\n'*}
case "$banner" in
  *"v$BUSYBOX_VERSION "*) ;;
  *) echo "busybox: the built binary says '$banner', not $BUSYBOX_VERSION" >&2; exit 1 ;;
esac
install -m 0755 "$src/busybox" "$OUT.new"
mv "$OUT.new" "$OUT"
echo "busybox: $banner in $OUT" >&2
echo "$OUT"
