"""Run every benchmark under bench/ and print their tables.

Usage: python bench/run.py [NAME ...]   (names without .py; default: all)

Each benchmark is a script that measures Roxxel and its named baselines in the same run
and prints a table of ratios; this runner only executes them one after another.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).parent
    scripts = sorted(p for p in here.glob("*.py") if p.name != "run.py" and not p.name.startswith("_"))
    if argv:
        scripts = [p for p in scripts if p.stem in argv]
    failed = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failed.append(script.stem)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
