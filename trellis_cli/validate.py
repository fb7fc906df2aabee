"""`trellis validate FILE`: check a canvas locally, one line per problem, exit 1 when there is any."""

from __future__ import annotations

import sys


def main(args) -> int:
    from services.orchestrator.engine.validate import validate_file

    issues = validate_file(args.file)
    if not issues:
        print(f"{args.file}: valid")
        return 0
    for issue in issues:
        print(f"{args.file}: {issue}", file=sys.stderr)
    print(f"{args.file}: {len(issues)} problem(s)", file=sys.stderr)
    return 1
