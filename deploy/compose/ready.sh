#!/bin/sh
# The compose health check of a pykubelet service: `ready.sh PORT` succeeds when the service's
# admin app on 127.0.0.1:PORT answers /readyz with 200.
#
# Every admin URL needs the node's admin token (root's, in the root dir's run/admin-token). It
# goes to the server through a pipe from the shell's printf builtin, never as an argument: with
# `pid: host` every local user could read it from a wget's or curl's command line. nc ends its
# half of the connection when printf is done; that is soon enough: the admin app writes the
# answer to /readyz before it reads any further (a view, built later, would need it held open).
token=$(cat /var/lib/pykubelet/run/admin-token) || exit 1
printf 'GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n' "$token" \
    | busybox nc -w 5 127.0.0.1 "$1" | head -n 1 | grep -q '^HTTP/1\.[01] 200 '
