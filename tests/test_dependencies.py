"""Dependencies we can trust: every third-party import is declared where it belongs, and the locks in
requirements/ are what pyproject.toml asks for, so installing from them installs what the code imports.

- The code that ships (services/, gateway/, trellis_cli/) imports only [project].dependencies; tests/ and chaos/
  add the dev extra; bench/ and scripts/ add the bench extra too. An import is matched to the distribution that
  provides it in this environment (importlib.metadata.packages_distributions()).
- Each lock pins every requirement of its groups at a version the requirement allows (`make lock` when not),
  the locks agree with each other, and this environment has dev.lock's versions installed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
REQ = ROOT / "requirements"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = {name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()}
# The locks are compiled for CPython 3.11 on x86-64 Linux (scripts/lock.sh): markers are read for that.
LOCK_ENV = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
# Built from source by scripts/install_llama_cpp.sh from its own lock; the project locks leave it out.
BUILT = canonicalize_name("llama-cpp-python")
# Our own top-level packages: the project's, the tests', and the generated protos' (proto/<name>/...).
FIRST_PARTY = {"services", "gateway", "trellis_cli", "tests", "bench", "scripts", "chaos",
               *(p.name for p in (ROOT / "proto").iterdir() if p.is_dir())}

# Which files may import what: (folders, the groups of pyproject.toml their imports must be declared in).
SCOPES = [
    (("services", "gateway", "trellis_cli"), ("dependencies",)),
    (("tests", "chaos"), ("dependencies", "dev")),
    (("bench", "scripts"), ("dependencies", "dev", "bench")),
]


def _declared(groups: tuple[str, ...]) -> set[str]:
    reqs = [r for g in groups for r in (RUNTIME if g == "dependencies" else EXTRAS[g])]
    return {canonicalize_name(r.name) for r in reqs}


def _imports(path: Path):
    """(top-level module, line) of every absolute import in the file, nested and conditional ones too."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.partition(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.partition(".")[0], node.lineno


def _local(module: str, path: Path, packaged: bool) -> bool:
    """A first-party module; or, in a script or a test, one beside the importing file or in a folder above it
    (bench/ puts its own folder on sys.path, and so does a vendored test tree). The packaged code is only ever
    imported as its packages, so there `import openai` in providers/openai.py is the distribution."""
    if module in FIRST_PARTY:
        return True
    return not packaged and any((folder / f"{module}.py").exists() or (folder / module).is_dir()
                                for folder in path.parents if folder.is_relative_to(ROOT) and folder != ROOT)


@pytest.mark.parametrize(("folders", "groups"), SCOPES, ids=["+".join(f) for f, _ in SCOPES])
def test_every_import_is_declared(folders, groups):
    providers = importlib.metadata.packages_distributions()
    declared = _declared(groups)
    stdlib = sys.stdlib_module_names
    problems = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module, line in _imports(path):
                if module in stdlib or _local(module, path, packaged=groups == ("dependencies",)):
                    continue
                where = f"{path.relative_to(ROOT)}:{line}"
                # Not installed (bench's extra, before `make bench`): a declared distribution of its name will do.
                dists = {canonicalize_name(d) for d in providers.get(module, [])} or {canonicalize_name(module)}
                if not dists & declared and module not in providers:
                    problems.append(f"{where} imports {module!r}, which no installed distribution provides")
                elif not dists & declared:
                    problems.append(f"{where} imports {module!r} (from {', '.join(sorted(dists))}), "
                                    f"not declared in pyproject.toml's {' or '.join(groups)}")
    assert not problems, "\n".join(problems)


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        if m := re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line):
            pins[canonicalize_name(m[1])] = m[2]
    return pins


LOCKS = {
    "dev.lock": ("dependencies", "dev"),
    "runtime.lock": ("dependencies",),
    "bench.lock": ("dependencies", "dev", "bench"),
}


@pytest.mark.parametrize("lock", LOCKS)
def test_lock_satisfies_pyproject(lock):
    pins = _pins(REQ / lock)
    problems = []
    for group in LOCKS[lock]:
        for req in RUNTIME if group == "dependencies" else EXTRAS[group]:
            name = canonicalize_name(req.name)
            if name == BUILT or (req.marker and not req.marker.evaluate(LOCK_ENV)):
                continue
            if name not in pins:
                problems.append(f"{req} is not in requirements/{lock}")
            elif not req.specifier.contains(pins[name], prereleases=True):
                problems.append(f"{req} is locked at {pins[name]} in requirements/{lock}")
    if BUILT in pins:
        problems.append(f"requirements/{lock} pins llama-cpp-python, which install_llama_cpp.sh builds")
    assert not problems, "\n".join(problems) + "\nrun `make lock` and commit requirements/"


@pytest.mark.parametrize("lock", ["runtime.lock", "bench.lock"])
def test_locks_agree_with_dev_lock(lock):
    """The image runs, and `make bench` measures, the versions `make test` ran with."""
    dev, other = _pins(REQ / "dev.lock"), _pins(REQ / lock)
    differ = [f"{name}: {other[name]} in {lock}, {dev[name]} in dev.lock" for name in other.keys() & dev.keys()
              if other[name] != dev[name]]
    assert not differ, "\n".join(differ) + "\nrun `make lock`"


def test_overrides_repeat_pyproject():
    """An override replaces our own requirement too: it must say what pyproject.toml says."""
    ours = {canonicalize_name(r.name): r for r in RUNTIME}
    for line in (REQ / "overrides.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            override = Requirement(line)
            assert override.specifier == ours[canonicalize_name(override.name)].specifier, (
                f"requirements/overrides.txt says {override}, pyproject.toml {ours[canonicalize_name(override.name)]}")


def _in_pins(source: Path) -> dict[str, str]:
    reqs = [Requirement(line) for line in source.read_text().splitlines() if line.strip() and not line.startswith("#")]
    pins = {}
    for req in reqs:
        (spec,) = req.specifier
        assert spec.operator == "==", f"{source.name}: {req} is not pinned exactly"
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_single_package_locks_match_their_sources():
    (llama,) = [r for r in RUNTIME if canonicalize_name(r.name) == BUILT]
    (spec,) = llama.specifier
    assert spec.operator == "==", f"pyproject.toml: {llama} must be exact (it is built from its sdist)"
    assert _pins(REQ / "llama-cpp-python.lock") == {BUILT: spec.version}, "run `make lock`"
    for name in ("models", "ragflow-sdk-0.27", "tools"):
        assert _pins(REQ / f"{name}.lock") == _in_pins(REQ / f"{name}.in"), f"requirements/{name}.lock: run `make lock`"


def test_environment_has_the_locked_versions():
    """What `make install` synced: the tests run with exactly dev.lock (and the extras' locks)."""
    wanted = {**_pins(REQ / "dev.lock"), **_pins(REQ / "models.lock")}
    differ = []
    for name, version in sorted(wanted.items()):
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differ.append(f"{name}: {installed or 'not installed'}, dev.lock says {version}")
    assert not differ, "\n".join(differ) + "\nrun `make install`"
