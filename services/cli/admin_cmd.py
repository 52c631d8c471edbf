"""`pykubelet admin SERVICE PATH`: GET one URL of a service's loopback admin app, as root.

The admin apps answer only requests carrying the node's admin token (shared/process/admin_token.py).
This reads it from the root dir and sends it in a header, never on a command line, where any
local user would see it in `ps`. The answer's body goes to stdout; the exit code is 0 for a 2xx
answer, 1 otherwise (the status on stderr), so scripts and health checks can use it.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
from pathlib import Path

from services.supervisor.leftovers import read_node_file
from shared.process.admin import SERVICES, admin_port
from shared.process.admin_token import AdminTokenError, read_token, token_path

DEFAULT_ROOT = os.environ.get("PYKUBELET_ROOT_DIR", "/var/lib/pykubelet")
TIMEOUT = 10.0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet admin", description=__doc__.split("\n\n")[0])
    p.add_argument("service", choices=SERVICES)
    p.add_argument("path", help="e.g. /readyz, /metrics, /pods")
    p.add_argument("--root-dir", default=DEFAULT_ROOT)
    p.add_argument("--admin-port-base", type=int, default=None,
                   help="as the node was given it (default: what `pykubelet up` recorded, else none)")
    args = p.parse_args(argv)
    if not args.path.startswith("/"):
        print(f"pykubelet admin: {args.path!r}: a path starts with /", file=sys.stderr)
        return 2
    root = Path(args.root_dir)
    try:
        token = read_token(token_path(root))
    except FileNotFoundError:
        print(f"pykubelet admin: no admin token in {token_path(root)}; is a node running from {root}?",
              file=sys.stderr)
        return 1
    except AdminTokenError as exc:  # Permission denied too: the file is root's
        print(f"pykubelet admin: {exc}", file=sys.stderr)
        return 1
    base = args.admin_port_base
    if base is None:
        recorded = read_node_file(root / "run").get("admin_port_base")
        base = recorded if isinstance(recorded, int) else 0
    port = admin_port(args.service, base)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", args.path, headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        body = resp.read()
    except OSError as exc:
        print(f"pykubelet admin: {args.service} at 127.0.0.1:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        conn.close()
    sys.stdout.buffer.write(body)
    if body and not body.endswith(b"\n"):
        sys.stdout.buffer.write(b"\n")
    if not 200 <= resp.status < 300:
        print(f"pykubelet admin: {args.service} {args.path}: {resp.status} {resp.reason}", file=sys.stderr)
        return 1
    return 0
