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
            if running:
                print(f"running: {existing.server} (KUBECONFIG={existing.kubeconfig})")
            elif existing is not None and existing.pids and existing.dead():
                print(
                    f"not running: {', '.join(existing.dead())} exited (logs in {state / 'logs'}); ./dev.sh cluster up starts it afresh"
                )
            else:
                print("not running")
            return 0 if running else 1
        if args.action == "down":
            if existing is None:
                print(f"nothing to stop in {state}")
                return 0
            existing.stop()
            shutil.rmtree(state, ignore_errors=True)
            print(f"control plane stopped; removed {state}")
            return 0
        if existing is not None and existing.running():
            print(f"already running: export KUBECONFIG={existing.kubeconfig}")
            return 0
        if existing is not None:
            if existing.pids and existing.dead():
                print(
                    f"control plane: {', '.join(existing.dead())} had exited (logs in {state / 'logs'}); "
                    "starting a new cluster (its objects are gone)",
                    file=sys.stderr,
                )
            existing.stop()
        shutil.rmtree(state, ignore_errors=True)
        plane = ControlPlane(state, build())
        plane.start(log=sys.stderr)
    except (BuildError, ClusterError, RuntimeError) as err:
        print(f"control plane: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("control plane: interrupted; what had started was stopped", file=sys.stderr)
        return 130
    print(f"kubectl: {state / 'bin' / 'kubectl'}  (stop with ./dev.sh cluster down)")
    print(f"export KUBECONFIG={plane.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
