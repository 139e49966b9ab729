"""MkDocs hook: the reference pages, generated from the code at every build so they cannot drift.

* ``reference/job-spec.md`` from :func:`roxxel_launch.spec.spec_schema` (types, defaults,
  required fields, descriptions), the spec's dataclasses (their docstrings),
  :data:`roxxel_launch.tpu.TPU_TYPES`, and manifests rendered by :func:`roxxel_launch.render.render`;
* ``reference/cli.md`` by walking the click command trees of ``roxxel`` and ``roxxel-launch``
  (and ``roxxel-worker --help``);
* ``reference/api/<module>.md``: one mkdocstrings page per module of the installed packages
  ``roxxel`` and ``roxxel_launch``, listed in the nav under the ``API`` entry.

Registered in mkdocs.yml under ``hooks:``. ``tests/docs/test_docs.py`` imports this file and
checks that every spec field, CLI command and option, and module is covered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import io
import json
import os
import sys
import typing
from pathlib import Path

API_DIR = "reference/api"
API_NAV_TITLE = "API"
PACKAGES = ("roxxel", "roxxel_launch")
# Not API: the ``python -m`` shims, the version string, the jinja2 templates package.
SKIP_MODULES = {"roxxel.__main__", "roxxel_launch.cli.__main__", "roxxel._version", "roxxel_launch.templates"}
REPO = Path(__file__).resolve().parents[2]

GENERATED_NOTE = (
    '!!! info "Generated page"\n    {what} Do not edit it: it is generated at every build by '
    "`docs/_hooks/reference.py`.\n"
)


# ----------------------------------------------------------------------------- job spec


def _type_text(prop: dict, path: str, links: dict[str, str]) -> str:
    kind = prop.get("type")
    if "enum" in prop:
        if len(prop["enum"]) == 1:
            return f"`{prop['enum'][0]}`"
        return "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
    if kind == "array":
        items = prop.get("items", {})
        if "properties" in items:
            return f"list of [objects](#{links[path + '[]']})"
        return f"list of {_type_text(items, path + '[]', links)}"
    if kind == "object":
        if "properties" in prop:
            text = f"[object](#{links[path]})"
            if any(o.get("enum") == ["cpu"] for o in prop.get("oneOf", [])):
                text += " or the string `cpu`"
            return text
        return f"map of string to {_type_text(prop.get('additionalProperties', {}), path + '.*', links)}"
    return kind or "any"


def _anchor(path: str) -> str:
    return "spec-" + (path.replace("[]", "-item").replace(".*", "-value").replace(".", "-") or "root")


def _objects(schema: dict, path: str, cls, out: list) -> None:
    """(path, schema, dataclass) of every object with properties, depth first, in field order."""
    out.append((path, schema, cls))
    hints = typing.get_type_hints(cls) if cls is not None else {}
    by_key = {}
    if cls is not None:
        for f in dataclasses.fields(cls):
            by_key[f.metadata.get("key", f.name)] = _dataclass_of(hints[f.name])
    for key, prop in schema.get("properties", {}).items():
        sub = f"{path}.{key}" if path else key
        if prop.get("type") == "object" and "properties" in prop:
            _objects(prop, sub, by_key.get(key), out)
        elif prop.get("type") == "array" and "properties" in prop.get("items", {}):
            _objects(prop["items"], sub + "[]", by_key.get(key), out)
        elif prop.get("type") == "object" and "properties" in (prop.get("additionalProperties") or {}):
            _objects(prop["additionalProperties"], sub + ".*", by_key.get(key), out)


def _dataclass_of(tp):
    """The dataclass inside ``tp`` (``X | None``, ``tuple[X, ...]``), or None."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        found = _dataclass_of(arg)
        if found is not None:
            return found
    return None


def _default_text(value) -> str:
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def _md_cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped outside code spans (inside, they are literal)."""
    parts = text.replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def job_spec_page() -> str:
    """The job spec reference (Markdown)."""
    from roxxel_launch import spec as spec_module
    from roxxel_launch import tpu

    schema = spec_module.spec_schema()
    objects: list = []
    _objects(schema, "", spec_module.JobSpec, objects)
    links = {path: _anchor(path) for path, _, _ in objects}
    lines = [
        "# Job spec reference",
        "",
        GENERATED_NOTE.format(
            what="This page is built from `roxxel_launch.spec.spec_schema()` and the spec's "
            "dataclasses; `roxxel-launch schema` prints the same schema as JSON."
        ),
        f"A job spec is a YAML file of kind `{spec_module.KIND}`, version `{spec_module.API_VERSION}`. "
        "`roxxel-launch validate SPEC` checks it and the manifests it renders without a cluster; "
        "`--set key.path=value` overrides any field on the command line (escape dots inside a key as "
        "`\\.`). Unknown fields are errors that suggest the closest known name.",
        "",
        "Fields, by the path you write them at (`accelerator.tpu.topology`):",
        "",
    ]
    for path, obj, cls in objects:
        title = f"`{path}`" if path else f"`{spec_module.KIND}` (the file)"
        lines += [f"## {title} {{ #{links[path]} }}", ""]
        doc = inspect.cleandoc(cls.__doc__) if cls is not None and cls.__doc__ else obj.get("description", "")
        if doc:
            lines += [doc.replace("``", "`"), ""]
        if obj.get("minProperties") == 1 and obj.get("maxProperties") == 1:
            lines += ["Give exactly one of its fields.", ""]
        lines += ["| field | type | required / default | description |", "|---|---|---|---|"]
        required = set(obj.get("required", []))
        for key, prop in obj["properties"].items():
            sub = f"{path}.{key}" if path else key
            if key in required:
                need = "**required**"
            elif "default" in prop:
                need = _default_text(prop["default"])
            else:
                need = "optional"
            lines.append(
                f"| `{sub}` | {_md_cell(_type_text(prop, sub, links))} | {_md_cell(need)} | "
                f"{_md_cell(prop.get('description', ''))} |"
            )
        lines.append("")

    lines += [
        "## TPU types and topologies { #spec-tpu-types }",
        "",
        "`accelerator.tpu.type` and `accelerator.tpu.topology` choose the node selectors "
        "(`cloud.google.com/gke-tpu-accelerator`, `cloud.google.com/gke-tpu-topology`) and the "
        "number of pods per slice: hosts = chips in the topology / chips per host. Built from "
        "`roxxel_launch.tpu.TPU_TYPES`.",
        "",
        "| type | GKE accelerator label | chips per host | single-host topologies (chips) | "
        "multi-host topologies (hosts) |",
        "|---|---|---|---|---|",
    ]
    for name, t in tpu.TPU_TYPES.items():
        single = ", ".join(f"`{topo}` ({chips})" for topo, chips in t.single_host.items())
        multi = sorted(t.multi_host, key=lambda s: (tpu.chips_in(s), s))
        shown = ", ".join(f"`{topo}` ({tpu.chips_in(topo) // t.chips_per_host})" for topo in multi[:6])
        more = f", ... ({len(multi)} in all, up to `{multi[-1]}`)" if len(multi) > 6 else ""
        lines.append(f"| `{name}` | `{t.gke_accelerator}` | {t.chips_per_host} | {single} | {shown}{more} |")
    lines.append("")
    lines += _environment_section()
    lines += _rendered_examples_section()
    return "\n".join(lines) + "\n"


def _env_rows(objects) -> dict[str, str]:
    for obj in objects:
        if obj["kind"] == "JobSet":
            pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        elif obj["kind"] == "Job":
            pod = obj["spec"]["template"]["spec"]
        else:
            continue
        rows = {}
        for var in pod["containers"][0]["env"]:
            if "value" in var:
                rows[var["name"]] = f"`{var['value']}`"
            else:
                rows[var["name"]] = f"downward API: `{var['valueFrom']['fieldRef']['fieldPath']}`"
        return rows
    return {}


def _environment_section() -> list[str]:
    from roxxel_launch.backends.local.pods import worker_processes
    from roxxel_launch.render import render
    from roxxel_launch.spec import spec_from_dict

    base = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "image": "IMAGE",
        "command": ["python", "train.py"],
        "checkpoint_dir": "gs://my-checkpoints/lm",
        "data": {"pvc": {"claim": "datasets"}},
    }
    jobset = spec_from_dict(
        {**base, "name": "lm", "accelerator": {"tpu": {"type": "v5e", "topology": "4x4"}}, "num_slices": 2}
    )
    indexed = spec_from_dict({**base, "name": "lm", "accelerator": {"cpu": {"hosts": 2}}, "workload": "indexed-job"})
    local = spec_from_dict({**base, "name": "lm", "accelerator": {"cpu": {"hosts": 2}}, "checkpoint_dir": "/tmp/ckpt"})
    columns = {
        "JobSet (2 slices of v5e `4x4`, 4 hosts each)": _env_rows(render(jobset).objects),
        "Indexed Job (2 CPU hosts)": _env_rows(render(indexed).objects),
        "`--local`, process 1 of 2": {
            k: f"`{v}`"
            for k, v in worker_processes(
                local, Path("RUN_DIR"), data_dir="/path/given/with/--data-dir", base_env={"PATH": "$PATH"}
            )[1][1].items()
        },
    }
    python_bin = os.path.dirname(sys.executable)
    for rows in columns.values():  # the interpreter's folder differs between machines
        for key, value in rows.items():
            rows[key] = value.replace(python_bin, "PYTHON_BIN")
    names: list[str] = []
    for rows in columns.values():
        names += [n for n in rows if n not in names]
    lines = [
        "## What every worker gets { #spec-environment }",
        "",
        "The environment variables of the worker container, as rendered for a spec with "
        "`name: lm`, `checkpoint_dir` and a `data` volume (the `--local` column: "
        "`checkpoint_dir: /tmp/ckpt`, `--data-dir`; `PYTHON_BIN` is the folder of the Python that runs "
        "`roxxel-launch`, `RUN_DIR` the run directory; the run adds `ROXXEL_HOST_ALIASES`, see "
        "[the local backend](../local.md#the-manifest-runs-here)). `roxxel.distributed.initialize()` reads "
        "the process identity from them; `JOB_COMPLETION_INDEX` is set by the Job controller "
        "itself. Every pod runs `roxxel-worker -- COMMAND...` and mounts the data volume read-only "
        "at `/data`.",
        "",
        "| variable | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for n in names:
        lines.append(f"| `{n}` | " + " | ".join(_md_cell(rows.get(n, "-")) for rows in columns.values()) + " |")
    return lines + [""]


def _rendered_examples_section() -> list[str]:
    from roxxel_launch.render import render
    from roxxel_launch.spec import load_spec

    lines = [
        "## The example specs and what they render { #spec-examples }",
        "",
        "The specs under `k8s/examples/` in the repository, each with the manifests "
        "`roxxel-launch render` makes of it.",
        "",
    ]
    for path in sorted((REPO / "k8s" / "examples").glob("*.yaml")):
        rel = path.relative_to(REPO)
        text = path.read_text(encoding="utf-8")
        rendered = render(load_spec(path)).yaml
        lines += [
            f"### `{rel}`",
            "",
            "```yaml",
            text.rstrip("\n"),
            "```",
            "",
            f'??? example "Rendered manifests of `{rel.name}`"',
            "",
            "    ```yaml",
        ]
        lines += [("    " + line) if line else "" for line in rendered.rstrip("\n").split("\n")]
        lines += ["    ```", ""]
    return lines


# ----------------------------------------------------------------------------- CLI


def _help_paragraphs(text: str | None) -> str:
    """A click help text as Markdown: paragraphs, and the ones click keeps as typed (``\\b``) preformatted."""
    if not text:
        return ""
    text = inspect.cleandoc(text.split("\f")[0])
    out = []
    for paragraph in text.split("\n\n"):
        lines = paragraph.split("\n")
        if lines[0].strip() == "\b":
            out.append("```text\n" + inspect.cleandoc("\n".join(lines[1:])) + "\n```")
        else:
            out.append(paragraph)
    return "\n\n".join(out)


def _command_section(cmd, ctx, level: int) -> list[str]:
    import click

    path = ctx.command_path
    lines = [f"{'#' * level} `{path}`", ""]
    help_text = _help_paragraphs(cmd.help)
    if help_text:
        lines += [help_text, ""]
    pieces = cmd.collect_usage_pieces(ctx)
    lines += ["```text", f"Usage: {path} {' '.join(pieces)}".rstrip(), "```", ""]
    arguments = [p for p in cmd.get_params(ctx) if isinstance(p, click.Argument)]
    if arguments:
        lines += [
            "Arguments: "
            + ", ".join(f"`{p.make_metavar(ctx) if _metavar_takes_ctx() else p.make_metavar()}`" for p in arguments),
            "",
        ]
    options = []
    for param in cmd.get_params(ctx):
        if isinstance(param, click.Option) and not param.hidden:
            record = param.get_help_record(ctx)
            if record is not None:
                options.append(record)
    if options:
        lines += ["Options:", ""]
        for opts, help_ in options:
            lines.append(f"- `{opts}`" + (f": {help_}" if help_ else ""))
        lines.append("")
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = click.Context(sub, info_name=name, parent=ctx)
            lines += _command_section(sub, sub_ctx, min(level + 1, 6))
    return lines


def _metavar_takes_ctx() -> bool:
    import click

    return "ctx" in inspect.signature(click.Argument.make_metavar).parameters


def _launch_exit_codes() -> str:
    """The "Exit codes:" section of ``roxxel_launch.cli``'s docstring, as Markdown."""
    import roxxel_launch.cli

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from griffe_rst import rst_to_markdown
    finally:
        sys.path.pop(0)
    doc = inspect.cleandoc(roxxel_launch.cli.__doc__ or "")
    start = doc.find("Exit codes:")
    if start < 0:
        return "(see `roxxel-launch COMMAND --help`)"
    section = doc[start + len("Exit codes:") :].strip()
    return rst_to_markdown(section.split("\n\n\n")[0])


def _worker_help() -> str:
    from roxxel import worker

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        worker.main(["--help"])
    return buf.getvalue().rstrip("\n")


def cli_page() -> str:
    """The command-line reference (Markdown)."""
    import click

    from roxxel.cli import main as roxxel_main
    from roxxel_launch.cli import cli as launch_cli

    lines = [
        "# Command-line reference",
        "",
        GENERATED_NOTE.format(
            what="This page is built by walking the click commands "
            "(`roxxel.cli.main`, `roxxel_launch.cli.cli`), so it shows exactly "
            "the commands, arguments, options and defaults of this version."
        ),
        "`roxxel` exits with 0 on success, 1 on an error (the message starts with `roxxel: error:`) "
        "and 2 on a bad command line. `roxxel-launch`, from its module documentation:",
        "",
        _launch_exit_codes(),
        "",
    ]
    for cmd, name in ((roxxel_main, "roxxel"), (launch_cli, "roxxel-launch")):
        ctx = click.Context(cmd, info_name=name)
        lines += _command_section(cmd, ctx, 2)
    lines += [
        "## `roxxel-worker`",
        "",
        "The container entrypoint of every worker pod (and of every `--local` worker): runs the "
        "training command as a child, forwards signals to it and exits with its code "
        "(see [Checkpointing and preemption](../checkpointing.md#roxxel-worker)).",
        "",
        "```text",
        _worker_help(),
        "```",
        "",
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- API


def api_modules() -> list[str]:
    """Every public module of the installed packages, sorted (packages before their modules)."""
    found = []
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"{package} is not installed: pip install -e . first")
        root = Path(list(spec.submodule_search_locations)[0])
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if (Path(dirpath, d) / "__init__.py").exists())
            rel = Path(dirpath).relative_to(root)
            prefix = ".".join((package, *rel.parts))
            for filename in sorted(filenames):
                if not filename.endswith(".py"):
                    continue
                stem = filename[:-3]
                name = prefix if stem == "__init__" else f"{prefix}.{stem}"
                if name in SKIP_MODULES or any(part.startswith("_") for part in name.split(".")):
                    continue
                if any(name.startswith(s + ".") for s in SKIP_MODULES):
                    continue
                found.append(name)
    return sorted(set(found), key=lambda n: n.split("."))


def api_pages() -> dict[str, str]:
    """``reference/api/<module>.md`` → its Markdown (one mkdocstrings block)."""
    pages = {}
    for name in api_modules():
        pages[f"{API_DIR}/{name}.md"] = f"# `{name}`\n\n::: {name}\n"
    modules = api_modules()
    index = [
        "# API reference",
        "",
        GENERATED_NOTE.format(
            what="One page per module of the installed packages `roxxel` and "
            "`roxxel_launch` (the launcher, in `launcher/roxxel_launch/`), "
            "rendered from the docstrings by mkdocstrings."
        ),
        "The names most programs use are importable from the packages themselves: "
        "`from roxxel import Roxxel, Curriculum, Phase, Stream` and "
        "`from roxxel.train import Trainer, Checkpointer, Logger, ModelState`.",
        "",
    ]
    for name in modules:
        depth = name.count(".")
        index.append(f"{'    ' * depth}- [`{name}`]({name}.md)")
    pages[f"{API_DIR}/index.md"] = "\n".join(index) + "\n"
    return pages


def api_nav() -> list:
    """Nav entries: the index, then the modules grouped by package."""
    groups: dict[str, list] = {}
    for name in api_modules():
        parts = name.split(".")
        group = ".".join(parts[:2]) if len(parts) > 2 else parts[0]
        groups.setdefault(group, []).append({name: f"{API_DIR}/{name}.md"})
    nav: list = [{"Overview": f"{API_DIR}/index.md"}]
    for group, entries in groups.items():
        nav.append({group: entries})
    return nav


# ----------------------------------------------------------------------------- MkDocs events


def _replace_nav(nav, title: str, replacement) -> bool:
    if isinstance(nav, list):
        for i, item in enumerate(nav):
            if isinstance(item, dict) and title in item and isinstance(item[title], str):
                nav[i] = {title: replacement}
                return True
            if _replace_nav(item, title, replacement):
                return True
    elif isinstance(nav, dict):
        return any(_replace_nav(v, title, replacement) for v in nav.values())
    return False


def on_config(config, **kwargs):
    if config.get("nav") and not _replace_nav(config["nav"], API_NAV_TITLE, api_nav()):
        raise ValueError(f"mkdocs.yml's nav needs an entry '{API_NAV_TITLE}: {API_DIR}/index.md' for the hook to fill")
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    generated = {"reference/job-spec.md": job_spec_page(), "reference/cli.md": cli_page(), **api_pages()}
    for path, content in generated.items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files
