"""The `trellis` command: `up` starts the stack; `validate` and `run` work with canvases."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trellis", description="RAGFlow agent canvases as gRPC microservices")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the whole stack on this machine and wait until it is healthy")
    validate = sub.add_parser("validate", help="check a canvas (RAGFlow DSL v1, template, or v2) without running it")
    validate.add_argument("file")
    run = sub.add_parser("run", help="run a canvas through the orchestrator and print its answer as it streams")
    run.add_argument("file")
    run.add_argument("--query", "-q", default="", help="the user's message (sys.query)")
    run.add_argument("--input", "-i", action="append", default=[], metavar="KEY=VALUE", help="a Begin input; repeatable")
    run.add_argument("--jsonl", action="store_true", help="print every event as one JSON line")
    run.add_argument("--tenant", default="default", help="tenant the run (and its session) belongs to")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "up":
        from trellis_cli.up import run_up

        return run_up()
    if args.command == "validate":
        from trellis_cli.validate import main as validate_main

        return validate_main(args)
    if args.command == "run":
        from trellis_cli.run import main as run_main

        return run_main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
