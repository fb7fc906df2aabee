"""`make bench`: run every bench/*_bench.py in turn (one at a time: the machine is small and shared),
each writing its JSON into bench/results/, then print a one-line summary per file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    failed = []
    for script in sorted((ROOT / "bench").glob("*_bench.py")):
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=ROOT).returncode != 0:
            failed.append(script.name)
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        summary = data.get("summary", data) if isinstance(data, dict) else data
        print(f"{path.relative_to(ROOT)}: {json.dumps(summary)[:400]}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
