"""The single codegen entry point: proto/ -> gen/python (docs/ARCHITECTURE.md, "Contracts").

Directory = package, so `proto/trellis/llm/v1/llm_service.proto` becomes the importable module
`trellis.llm.v1.llm_service_pb2` with no import rewriting. Regenerates only when a .proto is newer than
its outputs, so `make test` and `make up` can call it every time for free. Also drops a .pth file into the
running interpreter's site-packages so `import trellis...` works from any working directory.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "gen" / "python"


def _stale(protos: list[Path]) -> bool:
    stamp = OUT_DIR / ".stamp"
    if not stamp.exists():
        return True
    newest = max(p.stat().st_mtime for p in protos + [Path(__file__)])
    known = stamp.read_text().splitlines()
    return newest > stamp.stat().st_mtime or known != [str(p) for p in protos]


def _write_packages() -> None:
    # Plain (non-namespace) packages: gen/python/trellis/__init__.py etc., so imports are explicit.
    for folder in [OUT_DIR / "trellis", *(p for p in (OUT_DIR / "trellis").rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()


def _install_pth() -> None:
    for sp in site.getsitepackages():
        if Path(sp).is_dir() and sys.prefix in sp:
            (Path(sp) / "trellis_gen.pth").write_text(f"{OUT_DIR}\n")
            return


def main() -> int:
    protos = sorted(PROTO_DIR.rglob("*.proto"))
    _install_pth()
    if not protos:
        print("gen_protos: no .proto files under proto/", file=sys.stderr)
        return 1
    if not _stale(protos) and "--force" not in sys.argv:
        return 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"  # well-known types (Struct, Timestamp)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={OUT_DIR}",
        f"--grpc_python_out={OUT_DIR}",
        f"--plugin=protoc-gen-mypy={Path(sys.executable).parent / 'protoc-gen-mypy'}",
        f"--mypy_out={OUT_DIR}",
        *(str(p.relative_to(PROTO_DIR)) for p in protos),
    ]
    if protoc.main(args) != 0:
        print("gen_protos: protoc failed", file=sys.stderr)
        return 1
    _write_packages()
    (OUT_DIR / ".stamp").write_text("\n".join(str(p) for p in protos))
    print(f"gen_protos: generated {len(protos)} proto files into {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
