"""The launcher's dependencies are the ``launch`` extra (#52): the library and the worker need none
of them, and ``roxxel-launch`` without them says in one line which extra to install.

A fresh virtual environment without the extra (the worker image's install steps) is
tests/image/test_image.py::test_cpu_install_steps_run_in_a_fresh_venv; here the extra's modules
are hidden from one Python (``sys.modules[name] = None``: what ``import`` and ``find_spec`` then
report for a module that is not installed)."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from roxxel_launch.cli import LAUNCH_EXTRA

from support.paths import REPO

INSTALL_HINT = "pip install 'roxxel[launch]'"


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _installed_with(requirements: list[str]) -> set[str]:
    """The distributions these requirements install: theirs and their own unconditional requirements
    (one level down, as installed here: urllib3 and websocket-client come with kubernetes)."""
    names = set()
    for text in requirements:
        requirement = Requirement(text)
        names.add(canonicalize_name(requirement.name))
        for sub in map(Requirement, importlib.metadata.requires(requirement.name) or []):
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                names.add(canonicalize_name(sub.name))
    return names


def _third_party_imports(package_dir) -> dict[str, str]:
    """Top-level module -> the first file importing it, over every module of a package (function-level
    imports included), standard library and Roxxel's own packages left out."""
    found: dict[str, str] = {}
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("roxxel", "roxxel_launch"):
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


def _launch(*args: str, hidden: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``roxxel-launch ARGS`` (its console script's entry, main()) with the modules ``hidden``."""
    program = (
        "import sys\n"
        f"for name in {list(hidden)!r}: sys.modules[name] = None\n"
        "from roxxel_launch.cli import main\n"
        "sys.argv[0] = 'roxxel-launch'\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_the_launch_extra_is_what_the_launcher_checks_for():
    project = _project()
    assert _names(project["optional-dependencies"]["launch"]) == _names(list(LAUNCH_EXTRA.values()))
    assert not _names(project["dependencies"]) & _names(list(LAUNCH_EXTRA.values())), "a launch package in the base"
    # ./dev.sh main submits through roxxel-launch, and the dev extra includes main.
    assert "roxxel[launch]" in project["optional-dependencies"]["main"]
    assert "roxxel[main]" in project["optional-dependencies"]["dev"]


def test_the_library_imports_nothing_of_the_launch_extra():
    """What a worker runs (roxxel/) works with the base dependencies alone."""
    used = _third_party_imports(REPO / "roxxel")
    assert not {m: f for m, f in used.items() if m in LAUNCH_EXTRA}, "roxxel/ imports the launch extra"


def test_every_third_party_import_of_the_launcher_is_in_the_extra_or_the_base():
    """A package the launcher starts to import must come with the base or the launch extra."""
    project = _project()
    installed = _installed_with(project["dependencies"] + project["optional-dependencies"]["launch"])
    providers = importlib.metadata.packages_distributions()
    unknown = {
        module: path
        for module, path in _third_party_imports(REPO / "launcher" / "roxxel_launch").items()
        if not {canonicalize_name(d) for d in providers.get(module, [])} & installed
    }
    assert not unknown, f"add these to the launch extra (pyproject.toml) and LAUNCH_EXTRA: {unknown}"


@pytest.mark.parametrize(
    "args",
    [["--help"], ["render", "k8s/examples/cpu-smoke.yaml"], ["status", "no-such-job", "--local"]],
    ids=["help", "render", "local-status"],
)
@pytest.mark.parametrize("hidden", [("kubernetes", "kubernetes_validate"), ("yaml",)], ids=["kubernetes", "yaml"])
def test_without_the_extra_every_command_names_it_in_one_line(args, hidden):
    result = _launch(*args, hidden=hidden)
    assert result.returncode == 1, result
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("roxxel-launch: ") and line.endswith(INSTALL_HINT), line
    assert all(LAUNCH_EXTRA[name] in line for name in hidden), line


def test_with_the_extra_the_command_runs():
    result = _launch("render", "k8s/examples/cpu-smoke.yaml")
    assert result.returncode == 0, result.stderr
    assert "kind: JobSet" in result.stdout
