"""Run the benchmarks under bench/ and print their tables, then one summary table of the targets.

Each benchmark is a script that measures Roxxel and its named baselines in the same run
and prints tables of ratios; this runner executes the chosen ones one after another
(options after ``--`` go to every script) and ends with the targets each one recorded.

Exit status: 0 when every benchmark ran, 1 when one failed, 2 for a usage error (an
unknown benchmark name, a bad option).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent


def benchmarks() -> dict[str, pathlib.Path]:
    return {p.stem: p for p in sorted(HERE.glob("*.py")) if p.name != "run.py" and not p.name.startswith("_")}


def main(argv: list[str]) -> int:
    known = benchmarks()
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description=__doc__.split("\n\n")[0],
        epilog=f"benchmarks: {', '.join(known)}. Example: python bench/run.py stream -- --seconds 2 --rounds 5",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(map(repr, unknown))}; choose from: {', '.join(known)}")
    failed = []
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", prefix="roxxel-bench-") as summary:
        env = dict(os.environ, ROXXEL_BENCH_SUMMARY=summary.name)
        for name in args.names or list(known):
            print(f"\n=== {name} ===", flush=True)
            if subprocess.run([sys.executable, str(known[name]), *script_args], env=env).returncode != 0:
                failed.append(name)
        rows = [json.loads(line) for line in summary.read().splitlines() if line.strip()]
    if rows:
        width = max(len(r["target"]) for r in rows)
        print(f"\n=== targets ===\n{'target':<{width}}  {'measured':>12}  {'goal':>22}  met")
        for r in rows:
            met = {True: "yes", False: "NO", None: "-"}[r["met"]]
            print(f"{r['target']:<{width}}  {r['value']:>12}  {r['goal']:>22}  {met}")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
