"""The documentation site: every example runs, reference pages are generated, ``mkdocs build --strict`` passes.

Each page of ``docs/`` (and README.md) is one test: its ```python and ```bash blocks run in
order in a fresh working directory (see ``support/docs_blocks.py`` for the markers that skip a
block with a reason, expect an exit status or exception, or check an output). A renamed
argument or a changed message therefore fails here, not in a reader's terminal. Blocks that
need a cluster cannot run here (no API server): their specs are rendered and validated offline
instead, and the commands that follow must name the job's namespace (_cluster_problems).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import support.docs_blocks as blocks
from support.paths import WORKERS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
HOOK = DOCS / "_hooks" / "reference.py"
DRIVER = WORKERS / "docs_driver.py"
PAGE_TIMEOUT = 900

# README.md uses the same markers as the pages of docs/ (HTML comments: invisible on GitHub). Its
# examples define every name they use, as a reader runs them (issue 51: the Training block used a
# model, an optimizer and a loss that the test defined invisibly: NameError for the reader).
README_SLOW = "about 30 s"  # its blocks pack the LM's datasets (as ./dev.sh main does) and train 300 tiny steps

# Pages that others write, without markers: every example in them needs a Google Cloud
# project and a GKE cluster, so unmarked ones are not run. Their roxxel / roxxel-launch
# command lines are still checked against the real commands (test_cli_lines_in_skipped_examples).
OWNED_ELSEWHERE = {
    "docs/run-on-gke.md": ("cloud", "the GKE guide: every step needs a Google Cloud project and a cluster"),
}


def _pages() -> list[Path]:
    pages = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    return [REPO / "README.md", *pages]


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _parse(path: Path) -> blocks.Page:
    return blocks.parse(path.read_text(encoding="utf-8"), _rel(path))


def _skip_reason(page: blocks.Page, block: blocks.Block) -> str | None:
    if "requires" in block.markers:
        return block.markers["requires"]
    if page.path in OWNED_ELSEWHERE and block.kind in ("python", "bash"):
        kind, reason = OWNED_ELSEWHERE[page.path]
        return f"{kind}: {reason}"
    return None


def _params():
    out = []
    for path in _pages():
        page = _parse(path)
        marks = [pytest.mark.slow] if page.slow or (page.path == "README.md" and README_SLOW) else []
        out.append(pytest.param(path, id=_rel(path), marks=marks))
    return out


# ----------------------------------------------------------------------------- structure


def test_markers_are_well_formed():
    problems = []
    for path in _pages():
        page = _parse(path)
        problems += blocks.check_markers(page)
        try:
            blocks.expected_outputs(page)
        except blocks.MarkerError as err:
            problems.append(str(err))
    assert not problems, "\n".join(problems)


def test_every_example_runs_or_says_why():
    pages = [_parse(p) for p in _pages()]
    examples = [b for p in pages for b in p.examples]
    assert len(examples) > 40, "the docs have lost their examples"
    skipped = [(b.where, _skip_reason(p, b)) for p in pages for b in p.examples if _skip_reason(p, b)]
    for where, reason in skipped:
        kind, _, why = reason.partition(":")
        assert kind.strip() in blocks.REQUIRES_KINDS and why.strip(), f"{where}: skipped without a reason"
    # Most examples run: the skipped ones are those that need a cluster, a cloud or minutes.
    mine = [w for w, _ in skipped if not any(w.startswith(p + ":") for p in OWNED_ELSEWHERE)]
    assert len(mine) < len(examples) / 4, mine


def _cli_invocations(code: str) -> list[list[str]]:
    """``roxxel`` / ``roxxel-launch`` command lines in a shell block, as argument lists."""
    import shlex

    text = code.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote spanning lines: not a command line we check
            continue
        segment: list[str] = []
        for token in tokens + [";"]:
            if token in ("|", "||", "&&", ";", "&", "(", ")", "$(", "`"):
                while segment and "=" in segment[0] and not segment[0].startswith("-"):
                    segment.pop(0)  # VAR=value before the command
                if segment and segment[0] in ("roxxel", "roxxel-launch"):
                    found.append(segment)
                segment = []
            else:
                segment.append(token)
    return found


def _cli_problems(argv: list[str]) -> list[str]:

    from roxxel.cli import main as roxxel_cli
    from roxxel_launch.cli import cli as launch_cli

    group = {"roxxel": roxxel_cli, "roxxel-launch": launch_cli}[argv[0]]

    def known(cmd) -> set[str]:
        names = {"-h", "--help"}
        for param in cmd.params:
            names.update(getattr(param, "opts", []))
            names.update(getattr(param, "secondary_opts", []))
        return names

    args = argv[1:]
    while args and args[0].startswith("-"):
        if args[0].split("=")[0] not in known(group):
            return [f"{' '.join(argv)}: {argv[0]} has no option {args[0]}"]
        args = args[1:]
    if not args:
        return []
    cmd = group.commands.get(args[0])
    if cmd is None:
        return [f"{' '.join(argv)}: {argv[0]} has no command {args[0]!r}"]
    while hasattr(cmd, "commands") and len(args) > 1 and not args[1].startswith("-"):  # a subgroup
        sub = cmd.commands.get(args[1])
        if sub is None:
            return [f"{' '.join(argv)}: {argv[0]} {args[0]} has no command {args[1]!r}"]
        cmd, args = sub, [f"{args[0]} {args[1]}", *args[2:]]
    problems = []
    options = known(cmd)
    for token in args[1:]:
        if token == "--":
            break
        if token.startswith("-") and token != "-" and not token[1:2].isdigit():
            if token.split("=")[0] not in options:
                problems.append(f"{' '.join(argv)}: {argv[0]} {args[0]} has no option {token.split('=')[0]}")
    return problems


def _skipped_params():
    return [pytest.param(p, id=_rel(p)) for p in _pages()]


@pytest.mark.parametrize("path", _skipped_params())
def test_cli_lines_in_skipped_examples(path: Path):
    """Examples that cannot run here still name real commands and options."""
    page = _parse(path)
    problems = []
    for block in page.examples:
        if block.kind == "bash" and _skip_reason(page, block):
            for argv in _cli_invocations(block.code):
                problems += [f"{block.where}: {p}" for p in _cli_problems(argv)]
    if problems and page.path in OWNED_ELSEWHERE:
        pytest.xfail("this page is written elsewhere; tell its author:\n" + "\n".join(problems))
    assert not problems, "\n".join(problems)


_SHELL_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_BY_NAME = {"status", "logs", "resume", "delete", "wait"}


def _cluster_problems(page: blocks.Page) -> list[str]:
    """What cluster examples get wrong, found offline (no API server can run here).

    Every ``roxxel-launch submit SPEC`` of a block that needs a cluster (or a cloud) is
    rendered and validated as ``roxxel-launch validate`` would (the official schemas), with
    its ``--set`` overrides (shell variables stand for placeholders); SPEC is a file of the
    repository or one the page writes (``title="..."``). Each later command naming that job
    (status, logs, resume, delete, wait) must pass the spec's namespace (``-n``) unless it
    is ``default``: these commands cannot read the spec and use the kubeconfig's namespace.
    """
    from roxxel_launch.render import render
    from roxxel_launch.spec import load_spec, spec_from_dict
    from roxxel_launch.validate import validate

    files = {b.file: b.code for b in page.blocks if b.file}
    namespaces: dict[str, str] = {}
    problems = []
    for block in page.examples:
        reason = _skip_reason(page, block) or ""
        if block.kind != "bash" or reason.split(":")[0].strip() not in ("cluster", "cloud", "accelerator"):
            continue
        for argv in _cli_invocations(_SHELL_VAR.sub("example", block.code)):
            args = argv[1:]
            while args and args[0].startswith("-"):
                args = args[1:]
            if argv[0] != "roxxel-launch" or not args or "--local" in args:
                continue
            where = f"{block.where}: {' '.join(argv)}"
            positional = [
                a for i, a in enumerate(args[1:], 1) if not a.startswith("-") and not args[i - 1].startswith("-")
            ]
            if args[0] == "submit" and positional:
                overrides = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"]
                overrides += [a.split("=", 1)[1] for a in args if a.startswith("--set=")]
                try:
                    if positional[0] in files:
                        import yaml

                        spec = spec_from_dict(yaml.safe_load(files[positional[0]]), overrides)
                    else:
                        spec = load_spec(REPO / positional[0], overrides)
                    validate(render(spec).objects)
                except Exception as err:  # noqa: BLE001 - any failure is the problem to report
                    problems.append(f"{where}: does not render and validate: {err}")
                    continue
                namespaces[spec.name] = spec.namespace
            elif args[0] in _BY_NAME and positional and namespaces.get(positional[0], "default") != "default":
                if not any(a in ("-n", "--namespace") or a.startswith("--namespace=") for a in args):
                    problems.append(
                        f"{where}: job {positional[0]} is in namespace {namespaces[positional[0]]} "
                        f"(its spec's): add -n {namespaces[positional[0]]}"
                    )
    return problems


@pytest.mark.parametrize("path", _skipped_params())
def test_cluster_examples_render_validate_and_name_the_namespace(path: Path):
    """Examples that need a cluster are checked offline: their specs render and validate, and the
    commands that follow them name the job's namespace (see _cluster_problems)."""
    problems = _cluster_problems(_parse(path))
    assert not problems, "\n".join(problems)


def test_cluster_check_finds_a_missing_namespace():
    page = blocks.parse(
        "<!-- requires: cluster: x -->\n```bash\nroxxel-launch submit "
        "k8s/examples/tpu-v5p-multislice.yaml --set image=$IMAGE:tpu\n"
        "roxxel-launch status lm-v5p\nroxxel-launch logs lm-v5p -n ml -f\n"
        "roxxel-launch submit k8s/examples/cpu-smoke.yaml --set no_such_field=1\n```\n",
        "p.md",
    )
    problems = _cluster_problems(page)
    assert len(problems) == 2, problems
    assert "roxxel-launch status lm-v5p: job lm-v5p is in namespace ml (its spec's): add -n ml" in problems[0]
    assert "cpu-smoke.yaml --set no_such_field=1: does not render and validate" in problems[1]


def test_cli_line_check_finds_mistakes():
    assert _cli_invocations("KUBECONFIG=x roxxel-launch logs lm -f --no-such 2 | tail\nroxxel pack a \\\n  -o b") == [
        ["roxxel-launch", "logs", "lm", "-f", "--no-such", "2"],
        ["roxxel", "pack", "a", "-o", "b"],
    ]
    assert _cli_problems(["roxxel-launch", "logs", "lm", "-f", "--no-such", "2"]) == [
        "roxxel-launch logs lm -f --no-such 2: roxxel-launch logs has no option --no-such"
    ]
    assert _cli_problems(["roxxel-launch", "-v", "submit", "x.yaml", "--set=a=b", "--local"]) == []
    assert _cli_problems(["roxxel", "unpack", "x"]) == ["roxxel unpack x: roxxel has no command 'unpack'"]
    # Subcommands of a group (roxxel-launch image build) are checked with their own options.
    assert _cli_problems(["roxxel-launch", "image", "build", "--base", "b", "--push"]) == []
    assert _cli_problems(["roxxel-launch", "image", "build", "--no-such"]) == [
        "roxxel-launch image build --no-such: roxxel-launch image build has no option --no-such"
    ]
    assert _cli_problems(["roxxel-launch", "image", "push"]) == [
        "roxxel-launch image push: roxxel-launch image has no command 'push'"
    ]


def test_output_patterns():
    assert blocks.matches("packed ... documents", "x\npacked 12 documents, 3 tokens\n")
    assert blocks.matches("a\n...\nc", "a\nb\nc")
    assert not blocks.matches("a\nc", "a\nb\nc")
    assert blocks.matches("OK: 1 shard(s)", "OK: 1 shard(s), 2.0 KiB verified   \n")


# ----------------------------------------------------------------------------- running the examples


def _workdir(tmp_path: Path, page: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    # The repository's example specs and programs, as in a checkout (copies: pages may not edit the repo).
    for name in ("k8s", "examples"):
        shutil.copytree(REPO / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    return work


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROXXEL_") and k != "PYTHONPATH"}
    env.update(
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
        JAX_PLATFORMS="cpu",
        TF_CPP_MIN_LOG_LEVEL="3",
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
        HOME=env.get("HOME", str(work)),
    )
    return env


@pytest.mark.parametrize("path", _params())
def test_page_examples(path: Path, tmp_path: Path):
    page = _parse(path)
    assert not blocks.check_markers(page)
    run = [b for b in page.examples if not _skip_reason(page, b)]
    if not run:
        pytest.skip(f"{page.path} has no example that runs here")
    work = _workdir(tmp_path, page.path)
    spec = []
    for b in run:
        spec.append(
            {
                "kind": b.kind,
                "code": b.code,
                "where": b.where,
                "line": b.line,
                "file": b.file,
                "exit": b.markers.get("exit"),
                "raises": b.markers.get("raises"),
            }
        )
    (tmp_path / "blocks.json").write_text(json.dumps(spec), encoding="utf-8")
    results_path = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(tmp_path / "blocks.json"), str(results_path)],
        cwd=work,
        env=_env(work),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=PAGE_TIMEOUT,
    )
    results = json.loads(results_path.read_text()) if results_path.exists() else []
    print("seconds per example:", ", ".join(f"{r['where'].rsplit(':', 1)[1]}: {r['seconds']}" for r in results))
    by_where = {r["where"]: r for r in results}
    failed = [r for r in results if not r["ok"]]
    if failed or len(results) < len(run):
        r = failed[0] if failed else None
        where = r["where"] if r else (run[len(results)].where if len(results) < len(run) else "?")
        detail = (r["error"] + "\n--- output ---\n" + r["output"][-3000:]) if r else proc.stdout[-3000:]
        pytest.fail(
            f"example at {where} failed (exit {proc.returncode}):\n{detail}\n--- stderr ---\n{proc.stderr[-2000:]}",
            pytrace=False,
        )
    for example, expected in blocks.expected_outputs(page):
        if example.where not in by_where:
            continue  # a README example that is exempt
        actual = by_where[example.where]["output"]
        assert blocks.matches(expected.code, actual), (
            f"{expected.where}: the output of the example at {example.where} does not match.\n"
            f"--- expected (... = anything) ---\n{expected.code}--- actual ---\n{actual[-3000:]}"
        )
        # A reader sees Roxxel's warnings among the output (stderr): the block shows them too.
        unshown = [
            w for w in by_where[example.where].get("warnings", []) if w.splitlines()[0][:60] not in expected.code
        ]
        assert not unshown, (
            f"{expected.where}: the example at {example.where} prints warnings its output block does not show:\n"
            + "\n".join(unshown)
        )


# ----------------------------------------------------------------------------- generated reference pages


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("roxxel_docs_reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _field_paths(schema: dict, prefix: str = "") -> list[str]:
    paths = []
    for key, prop in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        paths.append(path)
        if prop.get("type") == "object" and "properties" in prop:
            paths += _field_paths(prop, path + ".")
        if prop.get("type") == "array" and "properties" in prop.get("items", {}):
            paths += _field_paths(prop["items"], path + "[].")
    return paths


def test_job_spec_reference_covers_every_field(hook):
    from roxxel_launch.spec import spec_schema

    page = hook.job_spec_page()
    paths = _field_paths(spec_schema())
    assert len(paths) > 40
    for path in paths:
        assert f"`{path}`" in page, f"the job spec reference lacks {path}"
    from roxxel_launch import tpu

    for name in tpu.TPU_TYPES:
        assert f"`{name}`" in page


def _commands(group, prefix):
    import click

    out = [prefix]
    if isinstance(group, click.Group):
        for name, cmd in group.commands.items():
            out += _commands(cmd, f"{prefix} {name}")
    return out


def test_cli_reference_covers_every_command_and_option(hook):
    from roxxel.cli import main as roxxel_cli
    from roxxel_launch.cli import cli as launch_cli

    page = hook.cli_page()
    for group, name in ((roxxel_cli, "roxxel"), (launch_cli, "roxxel-launch")):
        for path in _commands(group, name):
            assert f"## `{path}`" in page or f"# `{path}`" in page, f"the CLI reference lacks {path}"
        for cmd in group.commands.values():
            for param in cmd.params:
                for opt in getattr(param, "opts", []):
                    if opt.startswith("-"):
                        assert opt in page, f"the CLI reference lacks {name} {cmd.name} {opt}"
    assert "roxxel-worker" in page


def test_api_reference_lists_every_module(hook):
    pages = hook.api_pages()
    modules = {Path(p).stem for p in pages}
    for expected in (
        "roxxel.data.dataset",
        "roxxel.train.trainer",
        "roxxel.distributed",
        "roxxel_launch.spec",
        "roxxel_launch.backends.local.backend",
    ):
        assert expected in modules
    assert all(content.count(":::") == 1 for path, content in pages.items() if not path.endswith("index.md"))


def test_every_page_is_in_the_nav():
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)
    listed = set()

    def walk(item):
        if isinstance(item, str):
            listed.add(item)
        elif isinstance(item, dict):
            for v in item.values():
                walk(v)
        elif isinstance(item, list):
            for v in item:
                walk(v)

    walk(config["nav"])
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "_hooks" not in p.parts}
    assert on_disk - listed == set(), f"pages missing from mkdocs.yml's nav: {sorted(on_disk - listed)}"


def _docstring_warnings() -> list[str]:
    """What griffe says about the docstrings of roxxel and roxxel_launch (Google style), one line each."""
    import logging

    import griffe

    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                messages.append(record.getMessage())

    def walk(obj):
        yield obj
        for member in obj.members.values():
            if not member.is_alias:
                yield from walk(member)

    handler = Collect()
    logger = logging.getLogger("griffe")
    logger.addHandler(handler)
    try:
        for package in ("roxxel", "roxxel_launch"):
            module = griffe.load(package, search_paths=[str(REPO)], docstring_parser="google")
            for obj in walk(module):
                if obj.docstring is not None:
                    obj.docstring.parse("google", warn_unknown_params=False, warn_missing_types=False)
    finally:
        logger.removeHandler(handler)
    # Without line numbers: the files keep changing above the docstrings in question.
    return sorted(
        {re.sub(r"continuation line \d+", "continuation line N", re.sub(r":\d+:", ":", m, count=1)) for m in messages}
    )


# Docstring sections griffe cannot parse (the API pages then show them as plain text). The
# strict build does not fail on them (docstring_options.warnings: false in mkdocs.yml);
# this list does: a new one fails the test, and so does an entry that was fixed.
KNOWN_DOCSTRING_WARNINGS: set[str] = set()


def test_docstrings_parse_cleanly():
    pytest.importorskip("griffe", reason="the docs toolchain (mkdocstrings[python]) is not installed")
    found = _docstring_warnings()
    new = [w for w in found if not any(w.startswith(k) for k in KNOWN_DOCSTRING_WARNINGS)]
    fixed = [k for k in KNOWN_DOCSTRING_WARNINGS if not any(w.startswith(k) for w in found)]
    assert not new, "docstrings the API pages cannot render (fix them):\n" + "\n".join(new)
    assert not fixed, "fixed, remove from KNOWN_DOCSTRING_WARNINGS:\n" + "\n".join(fixed)


# ----------------------------------------------------------------------------- the site


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):  # about 5 s
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
        import material  # noqa: F401
    except ImportError as err:
        pytest.fail(
            f"the docs toolchain is not installed ({err}): the dev extra needs mkdocs, "
            "mkdocs-material and mkdocstrings[python]",
            pytrace=False,
        )
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    site = tmp_path / "site"
    for page in (
        "index.html",
        "reference/job-spec/index.html",
        "reference/cli/index.html",
        "reference/api/roxxel.data.dataset/index.html",
    ):
        assert (site / page).is_file(), page
    html = (site / "reference/api/roxxel.data.dataset/index.html").read_text()
    assert "read_into" in html  # mkdocstrings rendered the docstrings
