"""constraints.txt pins what a clean clone installs: every dependency pyproject.toml names is pinned there,
each pin inside pyproject's range, and the environment the suite runs in is the pinned one."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
#: Named by an extra but never installed by make test or make run (`.[npu]` needs CANN on the host).
NOT_INSTALLED_HERE = {"torch-npu"}


def pins() -> dict[str, Version]:
    out: dict[str, Version] = {}
    for n, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"constraints.txt line {n}: {line!r} is not name==version"
        out[canonicalize_name(name)] = Version(version)
    return out


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return [r for r in reqs if canonicalize_name(r.name) not in {"bcetune", *NOT_INSTALLED_HERE}]


def test_every_dependency_is_pinned_inside_its_range() -> None:
    pinned = pins()
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} (pyproject.toml) is not pinned in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pinned[name]}, outside pyproject.toml's {req.specifier}"
        )


def test_the_suite_runs_on_the_pinned_versions() -> None:
    for name, version in pins().items():
        installed = Version(metadata.version(name))
        assert installed.public == version.public, f"{name} {installed} is installed, constraints.txt pins {version}"
