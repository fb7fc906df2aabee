"""The `trellis` command: `up` starts the stack; `validate` and `run` work with canvases."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trellis", description="RAGFlow agent canvases as gRPC microservices")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the whole stack on this machine and wait until it is healthy")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        from trellis_cli.up import run_up

        return run_up()
    return 2


if __name__ == "__main__":
    sys.exit(main())
