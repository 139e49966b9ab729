"""User-facing messages of roxxel/ and launcher/ are scanned for the slips of issue 19, one test
per kind: counts written "N thing(s)" (roxxel.wording.count says "1 document", "2 documents"),
a sentence that ends twice ("found.."), a placeholder left unformatted ("{step}" in a plain
string), and Python arguments ("append=True") in the command lines' own messages (the CLIs
speak of flags). The scan reads the source with ``ast``: the literal parts of every string."""

from __future__ import annotations

import ast
import re

import pytest

from support.paths import REPO

SOURCES = sorted([*(REPO / "roxxel").rglob("*.py"), *(REPO / "launcher" / "roxxel_launch").rglob("*.py")])
CLI_MODULES = {REPO / "roxxel" / "cli.py", *(REPO / "launcher" / "roxxel_launch" / "cli").glob("*.py")}
MESSAGE_CALLS = {
    "debug",
    "info",
    "warning",
    "error",
    "exception",
    "critical",
    "warn",
    "echo",
    "secho",
    "fail",
    "log_message",
    "_log",
}


def _strings(tree: ast.AST):
    """(node, parts) for every string: a plain constant is one part; an f-string's parts are its
    literal pieces (str) and its placeholders (ast.FormattedValue), in order."""
    inside_fstring = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside_fstring.update(id(v) for v in node.values)
            yield node, [v.value if isinstance(v, ast.Constant) else v for v in node.values]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside_fstring:
            yield node, [node.value]


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _scan(check) -> list[str]:
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node, parts in _strings(tree):
            if id(node) not in skip and (problem := check(path, tree, node, parts)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {problem}")
    return found


_COUNT = re.compile(r"^ ?[a-z][a-z ]*\((s|es)\)")


def _count_slip(path, tree, node, parts):
    for before, after in zip(parts, parts[1:]):
        if isinstance(before, ast.FormattedValue) and isinstance(after, str) and _COUNT.match(after):
            return f"a count written {after.split(')')[0]}): use roxxel.wording.count"
    for part in parts:
        if isinstance(part, str) and re.search(r"%[ds] [a-z ]*\((s|es)\)", part):
            return "a count written 'N thing(s)': use roxxel.wording.count"
    return None


def _double_period(path, tree, node, parts):
    for i, part in enumerate(parts):
        if not isinstance(part, str) or part == "..":  # ".." alone: a path component, or steps {a}..{b}
            continue
        for m in re.finditer(r"(?<!\.)\.\.(?!\.)", part):
            at_end = m.end() == len(part)
            if not (part[m.end() : m.end() + 1].isalnum() or (at_end and i + 1 < len(parts))):  # 0..9, 0..{n}
                return f"{part!r} ends a sentence twice"
        prev = parts[i - 1] if i else None
        if (
            isinstance(prev, ast.FormattedValue)
            and part.startswith(". ")
            and "as_clause(" not in ast.unparse(prev.value)
            and re.search(r"\b(err|e|exc|error|message|msg|reason|problem)\b", ast.unparse(prev.value))
        ):
            return (
                f"'{{{ast.unparse(prev.value)}}}. ' ends a sentence after a message that may end with '.' "
                "already: use roxxel.wording.as_clause"
            )
    return None


_PLACEHOLDER = re.compile(r"\{[a-z_][a-z0-9_.\[\]']*(![rsa])?(:[^{}]*)?\}")


_MESSAGE_CONSTANTS: dict[int, tuple[ast.AST, set[int]]] = {}  # id(tree) -> (tree, ids): the tree kept alive


def _message_constants(tree):
    """Plain (non-f) string constants that are messages: arguments of a logging/echo call or of an
    exception being raised (``.format(...)`` on them is a call on the string, not an argument)."""
    if id(tree) in _MESSAGE_CONSTANTS:
        return _MESSAGE_CONSTANTS[id(tree)][1]
    out: set[int] = set()
    for node in ast.walk(tree):
        call = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call = node.exc
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in MESSAGE_CALLS:
                call = node
        if call is not None:
            for arg in call.args[:1]:
                for sub in ast.walk(arg):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        out.add(id(sub))
    _MESSAGE_CONSTANTS[id(tree)] = (tree, out)
    return out


def _unformatted(path, tree, node, parts):
    if len(parts) != 1 or not isinstance(node, ast.Constant):
        return None
    if id(node) not in _message_constants(tree):
        return None
    m = _PLACEHOLDER.search(node.value)
    return f"{m.group(0)!r} is never filled in: make the string an f-string" if m else None


_PY_ARG = re.compile(r"\b[a-z_]+=(True|False|None)\b")


def _python_argument(path, tree, node, parts):
    if path not in CLI_MODULES:
        return None
    text = "".join(p for p in parts if isinstance(p, str))
    m = _PY_ARG.search(text)
    return f"names the Python argument {m.group(0)!r}: name the flag" if m else None


def test_counts_read_as_english():
    assert not (found := _scan(_count_slip)), "\n".join(found)


def test_no_sentence_ends_twice():
    assert not (found := _scan(_double_period)), "\n".join(found)


def test_no_placeholder_is_left_unformatted():
    assert not (found := _scan(_unformatted)), "\n".join(found)


def test_cli_messages_name_flags_not_python_arguments():
    assert not (found := _scan(_python_argument)), "\n".join(found)


def test_the_checks_find_each_slip():
    def scan(code, check, path=REPO / "roxxel" / "cli.py"):
        tree = ast.parse(code)
        return [p for node, parts in _strings(tree) if (p := check(path, tree, node, parts))]

    assert scan('f"{n} worker(s) started"', _count_slip)
    assert not scan("f\"{count(n, 'worker')} started\"", _count_slip)
    assert scan('f"no checkpoint found.."', _double_period)
    assert scan('f"cannot read it: {err}. Retry"', _double_period)
    assert not scan('f"cannot read it: {as_clause(err)}. Retry"', _double_period)
    assert not scan('f"use 1..65535, processes 0..{n - 1}"', _double_period)
    assert not scan('f"steps {a}..{b}" + "wait..." ', _double_period)
    assert scan('log.warning("step {step} saved")', _unformatted)
    assert not scan('log.warning("step %d saved", step)', _unformatted)
    assert scan('raise click.UsageError("pass append=True")', _python_argument)
    assert not scan('raise click.UsageError("pass --append")', _python_argument)


def test_roxxel_pack_names_the_flag(tmp_path):
    from click.testing import CliRunner

    from roxxel.cli import main

    (tmp_path / "a.txt").write_text("one")
    out = str(tmp_path / "ds")
    assert CliRunner().invoke(main, ["pack", str(tmp_path / "a.txt"), "-o", out]).exit_code == 0
    again = CliRunner().invoke(main, ["pack", str(tmp_path / "a.txt"), "-o", out])
    assert again.exit_code == 1
    assert "pass --append to add to it" in again.output and "append=True" not in again.output
    appended = CliRunner().invoke(main, ["pack", str(tmp_path / "a.txt"), "-o", out, "--append"])
    assert "packed 1 document, 4 tokens" in appended.output and "holds 2 documents" in appended.output, appended.output


def test_roxxel_pack_names_the_eos_flag(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from click.testing import CliRunner

    from roxxel.cli import main

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.save(str(tmp_path / "tokenizer.json"))  # no end-of-text token among the usual names
    (tmp_path / "x.txt").write_text("a a")
    result = CliRunner().invoke(
        main,
        ["pack", str(tmp_path / "x.txt"), "-o", str(tmp_path / "ds"), "--tokenizer", str(tmp_path / "tokenizer.json")],
    )
    assert result.exit_code == 1
    assert "give its id with --eos-id N" in result.output and "eos_id=" not in result.output, result.output
