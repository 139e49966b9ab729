"""roxxel-launch speed: rendering + validating a large multislice JobSet, and CLI cold start.

1. Render + validate a 256-slice x 4-host JobSet (TPU v5e 4x4: 1,024 pods), as
   ``roxxel-launch validate`` / ``submit`` do before sending anything: the jinja2 render,
   parsing the YAML back, the name/enum/topology checks and kubernetes-validate (strict) of
   the child Job. Target: < 1 s. Baseline, measured in the same run:
     * ``yaml.safe_dump``  - PyYAML dumping the very same objects (what printing the
       manifests with plain PyYAML would cost, no checks).
   Also shown: the 1-slice job (a JobSet's size does not grow with num_slices: the
   slices are ``replicas`` of one replicated job), the JobSet CRD schema check that the
   tests add (jsonschema, unknown fields rejected), and the first call in a fresh process,
   which loads the templates and the Kubernetes schemas (as one CLI run does).
2. ``roxxel-launch --help`` in a fresh process (cold start). Target: < 0.5 s. Baseline:
   ``python -c pass`` (the interpreter's own start-up), in the same run.
3. The shard tools' cold start: what ``roxxel pack`` / ``info`` / ``verify`` / ``cat`` import
   before their first line of work (``roxxel.cli`` and ``roxxel.pack``), in a fresh process.
   Target: < 0.5 s. Baseline: ``import numpy``, which they need anyway. (ml_dtypes 0.7.0
   alone added 1.3 s here; pyproject.toml excludes it.)

Times are the best of several repeats, in milliseconds; lower is better.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _measure import record  # noqa: E402
from _table import print_table  # noqa: E402

import yaml  # noqa: E402

from roxxel_launch import render as R  # noqa: E402
from roxxel_launch import spec as S  # noqa: E402
from roxxel_launch import validate as V  # noqa: E402

REPEATS = 5
STARTUP_REPEATS = 7
RENDER_TARGET_S = 1.0
STARTUP_TARGET_S = 0.5
CRD = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "k8s" / "jobset.x-k8s.io_jobsets.yaml"

SPEC = {
    "apiVersion": "roxxel.dev/v1alpha1",
    "kind": "RoxxelJob",
    "name": "big",
    "namespace": "ml",
    "image": "us-docker.pkg.dev/my-project/roxxel/worker:tpu",
    "command": ["python", "examples/lm/train.py"],
    "accelerator": {"tpu": {"type": "v5e", "topology": "4x4"}},
    "num_slices": 256,
    "data": {"gcsfuse": {"bucket": "my-datasets", "only_dir": "shards"}},
    "checkpoint_dir": "gs://my-checkpoints/big",
    "service_account": "trainer",
    "queue": "team-a",
}


def best_of(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def render_and_validate(spec: S.JobSpec) -> R.Rendered:
    rendered = R.render(spec)
    V.validate(rendered.objects)  # check_objects + kubernetes-validate strict
    return rendered


def startup(cmd: list[str]) -> float:
    def once():
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    once()  # warm the page cache for every command alike
    return best_of(once, STARTUP_REPEATS)


def cold_render_and_validate() -> float:
    """Render + validate 256 x 4 once in a fresh process: the first call loads the templates
    and the schemas, as one `roxxel-launch validate` run does (interpreter start excluded)."""
    out = subprocess.run([sys.executable, __file__, "--cold-once"], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:] == ["--cold-once"]:
        t0 = time.perf_counter()
        render_and_validate(S.spec_from_dict(SPEC))
        print(time.perf_counter() - t0)
        return
    big = S.spec_from_dict(SPEC)
    small = S.spec_from_dict({**SPEC, "name": "small", "num_slices": 1})
    assert big.num_processes == 1024, big.num_processes
    render_and_validate(big)  # load the templates and schemas once, as any run of the CLI would
    objects = render_and_validate(big).objects
    crd_schema = V.jobset_crd_schema(yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))

    cold = min(cold_render_and_validate() for _ in range(3))
    rows = [
        ("yaml.safe_dump (same objects)", best_of(lambda: yaml.safe_dump_all(objects))),
        ("render 1 slice x 4 hosts", best_of(lambda: R.render(small))),
        ("render 256 x 4", best_of(lambda: R.render(big))),
        ("render + validate 1 x 4", best_of(lambda: render_and_validate(small))),
        ("render + validate 256 x 4", best_of(lambda: render_and_validate(big))),
        (
            "  + JobSet CRD schema (tests)",
            best_of(lambda: V.check_jobset_crd(render_and_validate(big).objects[0], crd_schema)),
        ),
        ("render + validate 256 x 4, cold", cold),
    ]
    rows = [(name, seconds * 1000) for name, seconds in rows]
    print_table(
        f"roxxel-launch render + validate: JobSet of {big.num_slices} slices x {big.hosts_per_slice} hosts "
        f"(TPU v5e 4x4, {big.num_processes} pods); best of {REPEATS} (cold: first call in a fresh process, "
        f"best of 3)",
        rows,
        "ms",
        "yaml.safe_dump (same objects)",
        higher_is_better=False,
    )
    total = max(dict(rows)["render + validate 256 x 4"], dict(rows)["render + validate 256 x 4, cold"]) / 1000
    print(
        f"target < {RENDER_TARGET_S:g} s: {'met' if total < RENDER_TARGET_S else 'MISSED'} "
        f"(worst of warm and cold: {total * 1000:.1f} ms)\n"
    )

    python = sys.executable
    commands = [
        ("python -c pass", [python, "-c", "pass"]),
        ("python -c 'import click'", [python, "-c", "import click"]),
        ("python -m roxxel_launch.cli --help", [python, "-m", "roxxel_launch.cli", "--help"]),
    ]
    script = pathlib.Path(python).with_name("roxxel-launch")
    if script.is_file():
        commands.append(("roxxel-launch --help (script)", [str(script), "--help"]))
    rows = [(name, startup(cmd) * 1000) for name, cmd in commands]
    print_table(
        f"roxxel-launch --help cold start, a fresh process each time; best of {STARTUP_REPEATS}",
        rows,
        "ms",
        "python -c pass",
        higher_is_better=False,
    )
    worst = max(value for name, value in rows if "--help" in name) / 1000
    print(
        f"target < {STARTUP_TARGET_S:g} s: {'met' if worst < STARTUP_TARGET_S else 'MISSED'} ({worst * 1000:.0f} ms)\n"
    )
    record(
        "roxxel-launch --help cold start",
        f"{worst * 1000:.0f} ms",
        f"< {STARTUP_TARGET_S * 1000:.0f} ms",
        worst < STARTUP_TARGET_S,
    )

    rows = [
        (name, startup([python, "-c", code]) * 1000)
        for name, code in [
            ("python -c 'import numpy'", "import numpy"),
            ("import roxxel.cli, roxxel.pack", "import roxxel.cli, roxxel.pack"),
        ]
    ]
    print_table(
        f"roxxel shard tools (pack, info, verify, cat) cold start, a fresh process each time; "
        f"best of {STARTUP_REPEATS}",
        rows,
        "ms",
        "python -c 'import numpy'",
        higher_is_better=False,
    )
    tools = rows[-1][1] / 1000
    record(
        "roxxel shard tools cold start",
        f"{tools * 1000:.0f} ms",
        f"< {STARTUP_TARGET_S * 1000:.0f} ms",
        tools < STARTUP_TARGET_S,
    )


if __name__ == "__main__":
    main()
