"""Run the examples of one documentation page, in order, the way a reader would.

Usage: python docs_driver.py BLOCKS_JSON RESULTS_JSON   (run with cwd = the page's working directory)

BLOCKS_JSON is a list of ``{"kind": "python"|"bash"|"file", "code", "where", "line", "exit", "raises", "file"}``.
Python blocks run with ``exec`` in one shared namespace (``__name__ == "__main__"``, the
working directory first on ``sys.path``); bash blocks run with ``bash -e -o pipefail``.
After each block, RESULTS_JSON is rewritten with one entry per block run so far:
``{"where", "ok", "output", "error", "seconds"}``. The run stops at the first failure.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import traceback

BASH_TIMEOUT = 600


class _Tee:
    """Stands in for sys.stdout/sys.stderr: keeps what the current block prints, and passes it on."""

    def __init__(self, real):
        self.real = real
        self.chunks: list[str] = []

    def write(self, text: str) -> int:
        self.chunks.append(text)
        self.real.write(text)
        return len(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"

    def fileno(self) -> int:
        return self.real.fileno()

    def take(self) -> str:
        text = "".join(self.chunks)
        self.chunks.clear()
        return text


class _LastResort(logging.Handler):
    """Python's last-resort handler (a script that configures no logging prints a warning's
    message alone on stderr), which also keeps the warnings of Roxxel's loggers: a page's
    output block must show them (tests/docs/test_docs.py)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.roxxel: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        sys.stderr.write(text + "\n")
        if record.name.split(".")[0] in ("roxxel", "roxxel_launch"):
            self.roxxel.append(text)


def _exception_matches(err: BaseException, name: str) -> bool:
    return any(cls.__name__ == name for cls in type(err).__mro__)


def main(blocks_path: str, results_path: str) -> int:
    with open(blocks_path, encoding="utf-8") as f:
        blocks = json.load(f)
    sys.path[0] = os.getcwd()  # like `python` started in the working directory
    out = _Tee(sys.__stdout__)
    sys.stdout = sys.stderr = out
    warned = _LastResort()
    logging.lastResort = warned
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    results = []
    for block in blocks:
        t0 = time.perf_counter()
        ok, error = True, ""
        if block["kind"] == "file":
            path = os.path.join(os.getcwd(), block["file"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(block["code"])
            output = ""
            if path.endswith(".py"):
                try:
                    compile("\n" * (block["line"] - 1) + block["code"], block["where"].rsplit(":", 1)[0], "exec")
                except SyntaxError:
                    ok, error = False, traceback.format_exc()
        elif block["kind"] == "python":
            source = "\n" * (block["line"] - 1) + block["code"]
            try:
                exec(compile(source, block["where"].rsplit(":", 1)[0], "exec"), namespace)
                if block.get("raises"):
                    ok, error = False, f"expected {block['raises']} to be raised, but the block finished"
            except BaseException as err:  # noqa: BLE001 - SystemExit too: a page must not exit
                if block.get("raises") and _exception_matches(err, block["raises"]):
                    print(f"{type(err).__name__}: {err}")
                else:
                    ok, error = False, traceback.format_exc()
            output = out.take()
        else:
            sys.__stdout__.flush()
            try:
                proc = subprocess.run(
                    ["bash", "-e", "-o", "pipefail", "-c", block["code"]],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    timeout=BASH_TIMEOUT,
                )
                output, code = proc.stdout, proc.returncode
            except subprocess.TimeoutExpired as err:
                raw = err.stdout or ""
                output = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
                code, ok, error = None, False, f"timed out after {BASH_TIMEOUT}s"
            sys.__stdout__.write(output)
            want = int(block["exit"]) if block.get("exit") is not None else 0
            if ok and code != want:
                ok, error = False, f"exit status {code}, expected {want}"
        results.append(
            {
                "where": block["where"],
                "ok": ok,
                "output": output,
                "error": error,
                "seconds": round(time.perf_counter() - t0, 2),
                "warnings": warned.roxxel,  # what this block's Python code logged
            }
        )
        warned.roxxel = []
        with open(results_path, "w", encoding="utf-8") as f:
            json.dump(results, f)
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1], sys.argv[2])
    import atexit

    atexit._run_exitfuncs()  # close what the page left open (loggers flush here) ...
    sys.__stdout__.flush()
    os._exit(code)  # ... but never wait for a thread that a page left running
