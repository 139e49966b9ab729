"""A checkpoint directory belongs to one run and has one writer (roxxel.train.checkpoint.ownership):
real Orbax saves on local disk; a second writer is a real second process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from roxxel.exit_codes import ConfigurationError
from roxxel.train.checkpoint import CheckpointOwnerError, Checkpointer
from support.ckpt import MODEL_DIMS, build


def _save(path, run_name, step=1):
    with Checkpointer(path, state=build(MODEL_DIMS, 0), run_name=run_name) as ckpt:
        ckpt.restore()
        ckpt.save(step, {"loss": 1.0}, force=True)


def test_the_first_save_records_the_run_and_another_run_is_refused_before_anything_is_read(tmp_path):
    path = tmp_path / "ckpt"
    _save(path, "lm")
    assert json.loads((path / "roxxel_run.json").read_text())["run"] == "lm"
    with pytest.raises(CheckpointOwnerError) as err:
        Checkpointer(path, state=build(MODEL_DIMS, 1), run_name="b")
    message = str(err.value)
    assert "belongs to run 'lm'" in message and "this run 'b'" in message and "checkpoint_dir" in message
    assert isinstance(err.value, ConfigurationError)  # exit 78 under roxxel-worker: not restarted
    assert sorted(p.name for p in path.iterdir() if p.name.isdigit()) == ["1"]  # nothing of lm's changed
    _save(path, "lm", step=2)  # the owner goes on


def test_no_run_name_checks_nothing_and_records_nothing(tmp_path):
    path = tmp_path / "ckpt"
    _save(path, None)
    assert not (path / "roxxel_run.json").exists()
    _save(path, "adopted", step=2)  # an older directory is adopted by the first named run
    assert json.loads((path / "roxxel_run.json").read_text())["run"] == "adopted"


SECOND_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from roxxel.train.checkpoint import Checkpointer, CheckpointOwnerError
    from support.ckpt import MODEL_DIMS, build
    try:
        Checkpointer(sys.argv[1], state=build(MODEL_DIMS, 0), run_name="lm")
    except CheckpointOwnerError as err:
        print("REFUSED", err)
        sys.exit(78)
    print("OPENED")
""")


@pytest.mark.slow
def test_a_second_writer_of_the_same_run_is_refused_in_one_line_naming_the_holder(tmp_path):
    from support.paths import TESTS

    path = tmp_path / "ckpt"
    with Checkpointer(path, state=build(MODEL_DIMS, 0), run_name="lm"):
        out = subprocess.run(
            [sys.executable, "-c", SECOND_WRITER, str(path), str(TESTS)], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 78, out.stdout + out.stderr
        assert "being written by another trainer (run 'lm', host" in out.stdout and "pid" in out.stdout
    # The holder closed: the lock is free again (a dead holder's too: the kernel drops a flock).
    out = subprocess.run(
        [sys.executable, "-c", SECOND_WRITER, str(path), str(TESTS)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "OPENED" in out.stdout, out.stdout + out.stderr


def test_two_checkpointers_of_one_program_share_the_lock(tmp_path):
    path = tmp_path / "ckpt"
    with Checkpointer(path, state=build(MODEL_DIMS, 0), run_name="lm"):
        with Checkpointer(path, state=build(MODEL_DIMS, 1), run_name="lm") as second:
            second.restore()


def _files(path):
    return sorted((str(p.relative_to(path)), p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file())


def test_restore_from_branches_from_another_runs_steps_and_writes_only_its_own_directory(tmp_path):
    """The explicit way to start from another run's weights: read there, saved here; the
    other run's directory is neither claimed nor changed."""
    from support.ckpt import flat_host, mismatches

    source, branch = tmp_path / "lm", tmp_path / "ft"
    _save(source, "lm", step=3)
    before = _files(source)
    reference = flat_host(build(MODEL_DIMS, 0))
    state = build(MODEL_DIMS, 1)
    assert mismatches(flat_host(state), reference)  # another init: the restore must change it
    with Checkpointer(branch, state=state, run_name="ft", restore_from=source) as ckpt:
        assert ckpt.restore() == 3
        assert not mismatches(flat_host(state), reference)
        ckpt.save(4, {"loss": 0.5}, force=True)
    assert _files(source) == before  # nothing of lm's written, its owner record kept
    assert json.loads((branch / "roxxel_run.json").read_text())["run"] == "ft"
    # Once the branch has steps of its own, a resume takes them, not the source's.
    with Checkpointer(branch, state=build(MODEL_DIMS, 2), run_name="ft", restore_from=source) as ckpt:
        assert ckpt.restore() == 4
    with pytest.raises(ValueError, match="is this run's own checkpoint directory"):
        Checkpointer(branch, state=build(MODEL_DIMS, 2), run_name="ft", restore_from=branch)


def test_a_missing_or_empty_restore_from_is_refused_not_a_fresh_start(tmp_path):
    """A typo in restore_from started the branch from scratch, and once it had saved its own
    steps the branch was lost for good; now restore() refuses it (a configuration error, 78)."""
    (tmp_path / "empty").mkdir()
    for source in (tmp_path / "missing", tmp_path / "empty"):
        with Checkpointer(
            tmp_path / f"ft-{source.name}", state=build(MODEL_DIMS, 0), run_name="ft", restore_from=source
        ) as ckpt:
            with pytest.raises(ConfigurationError, match="holds no complete checkpoint"):
                ckpt.restore()


def test_nested_restore_from_and_checkpoint_directories_are_refused(tmp_path):
    for mine, other in ((tmp_path / "lm" / "ft", tmp_path / "lm"), (tmp_path / "ft", tmp_path / "ft" / "lm")):
        with pytest.raises(ValueError, match="are nested"):
            Checkpointer(mine, state=build(MODEL_DIMS, 0), run_name="ft", restore_from=other)


def test_a_restore_from_in_the_environment_that_the_program_ignores_is_named(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ROXXEL_RESTORE_FROM", str(tmp_path / "lm"))
    with Checkpointer(tmp_path / "ft", state=build(MODEL_DIMS, 0), run_name="ft") as ckpt:
        with caplog.at_level("WARNING", logger="roxxel.checkpoint"):
            assert ckpt.restore() == 0
    assert "ROXXEL_RESTORE_FROM" in caplog.text and "given no restore_from" in caplog.text
