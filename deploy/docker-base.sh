#!/usr/bin/env bash
# The base image of deploy/Dockerfile, from Debian's packages instead of an image hub:
# mmdebstrap builds the rootfs (about a minute), `docker import` makes it an image. Skipped when
# the image exists and was built by this version of the script.
#
#   deploy/docker-base.sh [IMAGE]     (default pykubelet-base:bookworm)
set -euo pipefail

IMAGE=${1:-pykubelet-base:bookworm}
PACKAGES=python3,python3-venv,containerd,runc,containernetworking-plugins,nats-server,docker-registry,busybox-static,iptables,iproute2,mount,util-linux,ca-certificates
KEY=$(sha256sum "$0" | cut -c1-16)

if [ "$(docker image inspect -f '{{index .Config.Labels "pykubelet.base"}}' "$IMAGE" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
command -v mmdebstrap >/dev/null || { echo "docker-base: mmdebstrap is missing; \`make deps\` installs it" >&2; exit 1; }
echo "docker-base: building $IMAGE from Debian packages (mmdebstrap, about a minute)"
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" bookworm - \
  | docker import --change "LABEL pykubelet.base=$KEY" --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$IMAGE"
echo "docker-base: $IMAGE ready"
