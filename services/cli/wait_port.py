"""`pykubelet wait-port HOST:PORT`: wait until something accepts TCP connections there. A unit's
ExecStartPost uses it to tell systemd when a server without sd_notify (nats-server) is ready."""

from __future__ import annotations

import argparse
import socket
import sys
import time


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pykubelet wait-port")
    p.add_argument("address", help="HOST:PORT")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait (20)")
    args = p.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    if not host or not port.isdigit():
        print(f"pykubelet wait-port: {args.address!r} is not HOST:PORT", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return 0
        except OSError as exc:
            if time.monotonic() > deadline:
                print(f"pykubelet wait-port: nothing accepts connections on {args.address} after "
                      f"{args.timeout:.0f}s ({exc.strerror or exc})", file=sys.stderr)
                return 1
        time.sleep(0.1)
