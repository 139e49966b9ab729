"""``python -m support.control_plane up|down|status [STATE_DIR]`` (``./dev.sh cluster ...``).

``up`` builds what is not cached, starts the control plane with its state in STATE_DIR (default
``runs/cluster``), prints ``export KUBECONFIG=...`` and returns, leaving the components running;
``down`` stops every process ``up`` started and removes STATE_DIR; ``status`` says whether it runs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from .build import REPO, BuildError, build
from .cluster import ClusterError, ControlPlane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev.sh cluster", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("up", "down", "status", "build"))
    parser.add_argument(
        "state", nargs="?", default=str(REPO / "runs" / "cluster"), help="state directory (default: runs/cluster)"
    )
    args = parser.parse_args(argv)
    state = Path(args.state).resolve()
    existing = ControlPlane.load(state)
    try:
        if args.action == "build":
            print(build())
            return 0
        if args.action == "status":
            running = existing is not None and existing.running()
            print(f"running: {existing.server} (KUBECONFIG={existing.kubeconfig})" if running else "not running")
            return 0 if running else 1
        if args.action == "down":
            if existing is not None:
                existing.stop()
            shutil.rmtree(state, ignore_errors=True)
            print(f"control plane stopped; removed {state}")
            return 0
        if existing is not None and existing.running():
            print(f"already running: export KUBECONFIG={existing.kubeconfig}")
            return 0
        if existing is not None:
            existing.stop()
        shutil.rmtree(state, ignore_errors=True)
        plane = ControlPlane(state, build())
        plane.start(log=sys.stderr)
    except (BuildError, ClusterError) as err:
        print(f"control plane: {err}", file=sys.stderr)
        return 1
    print(f"kubectl: {state / 'bin' / 'kubectl'}  (stop with ./dev.sh cluster down)")
    print(f"export KUBECONFIG={plane.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
