"""Local control plane: seconds from ``start`` to a ready cluster, against the API server alone.

Starts the control plane of tests/support/control_plane (``./dev.sh cluster up``) ``--rounds``
times from its cached build (built first when it is not: that time is the cold build) and stops
it after each. Each start's readiness waits are timed in the same run: etcd, ``kube-apiserver``
(``/readyz``: the baseline, the part every Kubernetes test setup pays), the CRDs established,
the JobSet and Kueue controllers' health and webhooks, kwok's nodes Ready, the ``default``
ServiceAccount (the controller manager working). The target (issue #58): the whole start, median
of 5, within 60 s on 2 cores. The cold build's time is the one the cache recorded when it was
built (``COMPLETE``), with the date of that build.

Usage: python bench/cluster_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the control plane lives in the tests' support package

from _measure import load_average, median, record, spread  # noqa: E402

from support.control_plane import ControlPlane, build  # noqa: E402

TARGET_S = 60.0
BASELINE = "kube-apiserver"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    home = build()
    complete = home / "COMPLETE"
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime(complete.stat().st_mtime))
    samples: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        state = Path(tempfile.mkdtemp(prefix="roxxel-bench-cluster-"))
        plane = ControlPlane(state, home)
        began = time.monotonic()
        try:
            plane.start()
            total = time.monotonic() - began
        finally:
            plane.stop()
            shutil.rmtree(state, ignore_errors=True)
        for what, seconds in plane.timings.items():
            samples.setdefault(what, []).append(seconds)
        samples.setdefault("ready (whole start)", []).append(total)
    base = median(samples[BASELINE])
    width = max(map(len, samples))
    print(f"Local control plane start, {args.rounds} rounds ({load_average()}); seconds from start, lower is better")
    print(f"{'ready':<{width}}  {'median s':>9}  {'spread':>10}  {'vs ' + BASELINE:>18}")
    for what, values in samples.items():
        print(f"{what:<{width}}  {median(values):>9.2f}  {spread(values):>10}  {median(values) / base:>17.2f}x")
    whole = median(samples["ready (whole start)"])
    print(f"cold build (cached {built}): {complete.read_text().strip()}")
    record("cluster start (median)", f"{whole:.1f} s", f"<= {TARGET_S:.0f} s", whole <= TARGET_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
