"""llama.cpp's CPU code against this CPU: load the backend that runs here, or say clearly what is missing.

scripts/install_llama_cpp.sh builds one CPU backend per x86-64 level (libggml-cpu-x64.so, -sse42,
-haswell, -skylakex, ...) into llama_cpp/lib; ggml's loader scores each against this CPU and loads the
best one. llama-cpp-python does not point the loader at that directory, so `load_backends` does, before
the first model loads.

A build with one libggml-cpu.so (pip's own build, or other CMAKE_ARGS) has its instruction sets compiled
in, and on a CPU without them the first token dies with SIGILL. `check` therefore loads the library once in
a child process, reads the instruction sets of the CPU backend it got and compares them with the flags of
/proc/cpuinfo; a set this CPU lacks (or a child killed by SIGILL) becomes one clear error instead.

`python -m services.llm_gateway.providers.llama_cpu [LIB_DIR]` prints what the child reads: the backends
and their features, as llama.cpp's `llama_print_system_info` lists them.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from services.llm_gateway.errors import ModelUnavailable

# ggml's names of the x86 instruction sets its CPU code may be built with -> the flag /proc/cpuinfo shows.
X86_FEATURE_FLAGS = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX_VNNI": "avx_vnni",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_INT8": "amx_int8",
}
_INSTALL = "install it with: bash scripts/install_llama_cpp.sh .venv/bin/python"
_REMEDY = (
    "rebuild it for any x86-64 CPU (rm .venv/.llama-cpp-cmake-args && make; see scripts/install_llama_cpp.sh), "
    "or use a remote model instead: OPENAI_BASE_URL=... with TRELLIS_LLM_LOCAL=0"
)


def lib_dir() -> Path:
    """Where llama-cpp-python loads llama.cpp from (its own LLAMA_CPP_LIB_PATH override included)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"llama-cpp-python is not installed; {_INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def load_backends(directory: Path) -> None:
    """Register llama.cpp's backends from `directory` unless some are registered already (a build with the
    CPU backend linked in has it from the start). The handle is the one llama-cpp-python opened (same path)."""
    llama = ctypes.CDLL(str(directory / "libllama.so"))
    llama.ggml_backend_reg_count.restype = ctypes.c_size_t
    if llama.ggml_backend_reg_count() == 0:
        llama.ggml_backend_load_all_from_path(str(directory).encode())


def cpu_flags(cpuinfo: str) -> set[str]:
    """The instruction-set flags of the first processor in /proc/cpuinfo's text (x86: the `flags` line)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def backend_features(system_info: str) -> set[str]:
    """The CPU features llama.cpp reports (`CPU : SSE3 = 1 | AVX = 1 | ... |`), as ggml names them."""
    _, _, cpu = system_info.partition("CPU :")
    return {name.strip() for name, _, value in (f.partition("=") for f in cpu.split("|")) if value.strip() == "1"}


def missing_instruction_sets(features: set[str], flags: set[str]) -> list[str]:
    """The x86 instruction sets among `features` that `flags` (this CPU's) lacks, in ggml's names.

    No flags (not an x86 /proc/cpuinfo) means nothing to compare: nothing is reported missing."""
    if not flags:
        return []
    return [name for name, flag in X86_FEATURE_FLAGS.items() if name in features and flag not in flags]


def check(directory: Path, flags: set[str]) -> None:
    """Raise ModelUnavailable, in one line, when llama.cpp in `directory` cannot run on a CPU with `flags`."""
    try:
        probe = subprocess.run(
            [sys.executable, "-m", __name__, str(directory)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        raise ModelUnavailable(f"llama.cpp in {directory} did not load within 120 s") from None
    if probe.returncode == -signal.SIGILL:
        absent = [name for name, flag in X86_FEATURE_FLAGS.items() if flags and flag not in flags]
        raise ModelUnavailable(
            f"the local chat model cannot run on this CPU: llama.cpp in {directory} stops with an illegal instruction "
            f"(it was built for instruction sets this CPU lacks, among {', '.join(absent) or 'unknown ones'}); {_REMEDY}"
        )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
        raise ModelUnavailable(f"llama.cpp in {directory} does not load: {last}")
    features = backend_features(probe.stdout)
    if not features and "CPU :" not in probe.stdout:
        raise ModelUnavailable(f"llama.cpp in {directory} loaded no CPU backend for this CPU; {_REMEDY}")
    missing = missing_instruction_sets(features, flags)
    if missing:
        raise ModelUnavailable(
            f"the local chat model cannot run on this CPU: llama.cpp in {directory} was built with "
            f"{', '.join(missing)}, which this CPU lacks; {_REMEDY}"
        )


def import_llama() -> Any:
    """llama_cpp.Llama, checked against this CPU and with its backends loaded: the one way to get it."""
    # llama.cpp's OpenMP threads spin between tokens by default, taking the cores from every other process
    # (and from this one's next token): on a busy 2-core host a 24-token answer took 12-21 s instead of
    # 1.2-1.6 s. Waiting threads sleep instead; set before the CPU backend loads the OpenMP runtime.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    check_this_cpu()
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise ModelUnavailable(f"llama-cpp-python does not import: {exc}; {_INSTALL}") from exc
    load_backends(lib_dir())
    return Llama


@functools.cache
def check_this_cpu() -> None:
    """`check` for the installed llama.cpp and this machine's CPU; once it passed, not again in this process."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: no flags to compare, the probe still catches an illegal instruction
        cpuinfo = ""
    check(lib_dir(), cpu_flags(cpuinfo))


def _print_system_info(directory: Path) -> None:
    load_backends(directory)
    llama = ctypes.CDLL(str(directory / "libllama.so"))
    llama.llama_print_system_info.restype = ctypes.c_char_p
    print(llama.llama_print_system_info().decode())


if __name__ == "__main__":
    _print_system_info(Path(sys.argv[1]) if len(sys.argv) > 1 else lib_dir())
