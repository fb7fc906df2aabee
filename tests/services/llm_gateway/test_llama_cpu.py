"""The local chat model's runtime against the CPU: the installed llama.cpp loads a CPU backend this machine
runs, and a CPU lacking what the library was built with gets one line naming it instead of SIGILL.

Other CPUs are played by fake /proc/cpuinfo flags lists; the library is the real installed one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.llm_gateway.errors import ModelUnavailable
from services.llm_gateway.providers import llama_cpu
from services.llm_gateway.providers.llama_cpu import (
    X86_FEATURE_FLAGS,
    backend_features,
    check,
    cpu_flags,
    lib_dir,
    missing_instruction_sets,
)

# An x86-64 CPU from before AVX (2008): the baseline plus SSE3/SSSE3/SSE4.
OLD_CPU = {"fpu", "tsc", "cx8", "cmov", "mmx", "fxsr", "sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt"}
CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM)2 Quad CPU Q9650
flags\t\t: fpu tsc cx8 cmov mmx fxsr sse sse2 pni ssse3 sse4_1 sse4_2 popcnt

processor\t: 1
flags\t\t: fpu sse sse2
"""


def test_cpu_flags_are_read_from_the_first_processor():
    assert cpu_flags(CPUINFO) == OLD_CPU
    assert cpu_flags("processor\t: 0\nFeatures\t: fp asimd\n") == set()  # ARM: no x86 flags line


def test_backend_features_are_parsed_from_llama_cpp_system_info():
    info = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | REPACK = 1 | "
    assert backend_features(info) == {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "REPACK"}
    assert backend_features("") == set()


def test_missing_instruction_sets_are_named_as_ggml_names_them():
    built = {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE", "OPENMP"}
    assert missing_instruction_sets(built, OLD_CPU) == ["AVX", "AVX2", "F16C", "FMA", "BMI2"]
    assert missing_instruction_sets(built, OLD_CPU | {"avx", "avx2", "f16c", "fma", "bmi2"}) == []
    assert missing_instruction_sets({"SSE3"}, OLD_CPU) == []  # the portable levels run here
    assert missing_instruction_sets(built, set()) == []  # no x86 flags to compare against


def _installed_features() -> set[str]:
    out = subprocess.run([sys.executable, "-m", llama_cpu.__name__], capture_output=True, text=True, check=True)
    return backend_features(out.stdout) & set(X86_FEATURE_FLAGS)


def test_the_installed_library_passes_on_this_cpu():
    check(lib_dir(), cpu_flags(Path("/proc/cpuinfo").read_text()))


def test_a_cpu_without_the_loaded_backends_instruction_sets_gets_one_line_naming_them():
    needed = _installed_features()  # what the CPU backend loaded on this machine was built with
    if not needed:  # this CPU runs only the baseline backend: no instruction set to take away
        check(lib_dir(), OLD_CPU - {"pni", "ssse3"})
        return
    this_cpu = cpu_flags(Path("/proc/cpuinfo").read_text())
    lacking = this_cpu - {X86_FEATURE_FLAGS[n] for n in needed}
    with pytest.raises(ModelUnavailable) as err:
        check(lib_dir(), lacking)
    message = err.value.message
    assert "\n" not in message
    assert all(name in message for name in needed)
    assert "OPENAI_BASE_URL" in message and "TRELLIS_LLM_LOCAL=0" in message


def test_an_illegal_instruction_while_loading_is_reported_not_fatal(tmp_path, monkeypatch):
    # The probe runs in a child process, so the SIGILL of an unsuitable build kills the child only.
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\nkill -ILL $$\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(llama_cpu.sys, "executable", str(fake_python))
    with pytest.raises(ModelUnavailable) as err:
        check(lib_dir(), OLD_CPU)
    message = err.value.message
    assert "illegal instruction" in message and "AVX2" in message and "TRELLIS_LLM_LOCAL=0" in message
    assert "\n" not in message
