"""The private Orbax/JAX uses are pinned: pyproject.toml's ranges equal the ranges
roxxel/train/checkpoint/_orbax.py was tested on, and the installed versions are inside them."""

from __future__ import annotations

import importlib.metadata
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from roxxel.train.checkpoint import _orbax
from support.paths import REPO as ROOT


def _declared() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in ("tpu", "cuda") for r in project["optional-dependencies"][extra]]
    out: dict[str, SpecifierSet] = {}
    for req in requirements:
        if req.name in _orbax.TESTED:
            assert out.setdefault(req.name, req.specifier) == req.specifier, f"{req.name}: two ranges in pyproject.toml"
    return out


def test_pyproject_pins_the_tested_ranges():
    declared = _declared()
    for name, (low, high) in _orbax.TESTED.items():
        assert declared.get(name) == SpecifierSet(f">={low},<{high}"), (
            f"pyproject.toml declares {name}{declared.get(name)}, but _orbax.TESTED says >={low},<{high}: keep them equal"
        )


def test_installed_versions_are_inside_the_tested_ranges():
    for name, (low, high) in _orbax.TESTED.items():
        installed = importlib.metadata.version(name)
        assert installed in SpecifierSet(f">={low},<{high}"), (
            f"{name} {installed} is installed, outside the range Roxxel's private {name} uses were tested on "
            f"(>={low},<{high}, roxxel/train/checkpoint/_orbax.py): run tests/train on it, then widen TESTED and pyproject.toml"
        )
    assert _orbax.untested_versions() == []


def test_a_version_outside_the_range_is_named(monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.13.1" if name == "orbax-checkpoint" else real(name)
    )
    (line,) = _orbax.untested_versions()
    assert line.startswith("orbax-checkpoint 0.13.1 is installed") and ">=0.12,<0.13" in line
