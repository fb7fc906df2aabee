#!/usr/bin/env python3
"""Where a process's RSS goes, by kind of mapping, over time: beside a soak, to tell which kind of memory a step
in RSS is (docs/speed-policies.md, "The allocator").

    .venv/bin/python bench/smaps_watch.py watch OUT.jsonl [--match " -m "] [--every-s 5]
    .venv/bin/python bench/smaps_watch.py summary OUT.jsonl [--match services.orchestrator] [--after-s 120]

`watch` writes a line every few seconds for each process whose command line contains `--match`: its pid,
command, thread count and resident KiB per kind of mapping (`/proc/<pid>/smaps`): a library or file by name,
`[heap]` (the C heap), `anon:8MiB` (thread stacks), `anon:64MiB` (glibc's per-thread heaps) and `anon:small`
(every other anonymous mapping: pymalloc's 1 MiB arenas, merged with their neighbours, and large malloc blocks).
`summary` gives, for each process, what each kind gained from `--after-s` past its first sample to its last.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter, defaultdict

MIB = 1 << 20


def kind(header: str) -> str:
    fields = header.split()
    start, end = (int(x, 16) for x in fields[0].split("-"))
    path = fields[5] if len(fields) > 5 else ""
    if path.startswith("/"):
        return "file:" + os.path.basename(path)
    if path:
        return path  # [heap], [stack], [vdso]...
    size = end - start
    if size in (8 * MIB, 8 * MIB + 4096):
        return "anon:8MiB"
    if size >= 32 * MIB:
        return "anon:64MiB"
    return "anon:small"


def resident(pid: str) -> dict[str, int]:
    kib: Counter[str] = Counter()
    current = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                current = kind(line)
            elif line.startswith("Rss:"):
                kib[current] += int(line.split()[1])
    return dict(kib)


def watch(out_path: str, match: str, every_s: float) -> None:
    with open(out_path, "a") as out:
        while True:
            now = time.time()
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    if match not in cmd or "smaps_watch" in cmd:
                        continue
                    row = {"t": now, "pid": int(pid), "cmd": cmd[:120],
                           "threads": len(os.listdir(f"/proc/{pid}/task")), "kib": resident(pid)}
                except (FileNotFoundError, ProcessLookupError, PermissionError):
                    continue  # gone meanwhile
                out.write(json.dumps(row) + "\n")
            out.flush()
            time.sleep(every_s)


def summary(path: str, match: str, after_s: float) -> None:
    by_pid: dict[int, list[dict]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if match in row["cmd"]:
                by_pid[row["pid"]].append(row)
    for pid, rows in sorted(by_pid.items(), key=lambda kv: kv[1][0]["t"]):
        rows = [r for r in rows if r["t"] >= rows[0]["t"] + after_s]
        if len(rows) < 2:
            continue
        first, last = rows[0], rows[-1]
        gained: Counter[str] = Counter()
        for name in set(first["kib"]) | set(last["kib"]):
            gained["files" if name.startswith("file:") else name] += last["kib"].get(name, 0) - first["kib"].get(name, 0)
        print(f"{pid} {last['cmd'][:50]!r}: {(last['t'] - first['t']) / 60:.1f} min, "
              f"{sum(gained.values()):+d} KiB, threads {first['threads']} -> {last['threads']}: "
              + ", ".join(f"{k} {v:+d}" for k, v in sorted(gained.items()) if v))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch")
    w.add_argument("out")
    w.add_argument("--match", default=" -m ")
    w.add_argument("--every-s", type=float, default=5.0)
    s = sub.add_parser("summary")
    s.add_argument("path")
    s.add_argument("--match", default=" -m ")
    s.add_argument("--after-s", type=float, default=120.0)
    args = parser.parse_args()
    if args.command == "watch":
        watch(args.out, args.match, args.every_s)
    else:
        summary(args.path, args.match, args.after_s)


if __name__ == "__main__":
    main()
