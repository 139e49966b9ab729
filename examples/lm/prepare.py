"""Pack the language model's data: real text that ships with every Python.

Three datasets of byte-level tokens, under OUTPUT (default runs/data/lm):
  code/       .py sources of the standard library (every file but each 20th)
  text/       the library's other text files (.txt, .rst, .toml, .json, .xml, .cfg, decimal tests)
  code-eval/  every 20th .py file, held out for evaluation

Usage: python examples/lm/prepare.py [OUTPUT]
Packing an existing dataset again is skipped.
"""

from __future__ import annotations

import os
import sys
import sysconfig

from roxxel.pack import iter_input_files, pack

TEXT_PATTERNS = ["*.txt", "*.rst", "*.toml", "*.json", "*.xml", "*.cfg", "*.decTest", "*.css", "*.html", "*.md"]
EXCLUDE = ["*/site-packages/*", "*/__pycache__/*"]
HOLD_OUT_EVERY = 20


def datasets(stdlib: str) -> dict[str, list[str]]:
    code = list(iter_input_files([stdlib], ["*.py"], EXCLUDE))
    text = list(iter_input_files([stdlib], TEXT_PATTERNS, EXCLUDE))
    return {
        "code": [f for i, f in enumerate(code) if i % HOLD_OUT_EVERY],
        "code-eval": code[::HOLD_OUT_EVERY],
        "text": text,
    }


def main(output: str) -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    for name, files in datasets(stdlib).items():
        path = os.path.join(output, name)
        if os.path.exists(os.path.join(path, "dataset.json")):
            print(f"{path}: already packed")
            continue
        m = pack(files, path)
        print(f"{path}: {m.num_documents:,} documents, {m.num_tokens:,} tokens")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/data/lm")
