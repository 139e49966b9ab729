"""examples/lm/prepare.py, as ./dev.sh main runs it: every step that takes a while says so
before it starts (issue 51: packing was silent for ~20 s)."""

import importlib.util
import types

import pytest

from support.paths import REPO


@pytest.fixture
def prepare():
    spec = importlib.util.spec_from_file_location("lm_prepare_example", REPO / "examples/lm/prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_pack_is_announced_before_it_starts(prepare, tmp_path, monkeypatch, capsys):
    seen_before_pack = []

    def fake_pack(paths, path, **kw):
        seen_before_pack.append(capsys.readouterr().out)
        return types.SimpleNamespace(num_documents=len(paths), num_tokens=10 * len(paths))

    monkeypatch.setattr(prepare, "datasets", lambda stdlib: {"code": ["a.py", "b.py"], "text": ["c.txt"]})
    monkeypatch.setattr(prepare, "train_tokenizer", lambda files, out: open(out, "w").close())
    monkeypatch.setattr(prepare, "pack", fake_pack)
    prepare.main(str(tmp_path))
    assert len(seen_before_pack) == 2
    assert f"{tmp_path / 'code'}: packing 2 files" in seen_before_pack[0]
    assert f"{tmp_path / 'text'}: packing 1 file" in seen_before_pack[1]
