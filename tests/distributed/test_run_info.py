"""roxxel.run.run_info: the launcher's run variables, read in one place, with defaults for a run by hand."""

import pytest

from roxxel.run import RunInfo, run_info


def test_the_launchers_values_win_over_the_defaults():
    env = {
        "ROXXEL_RUN_NAME": "lm-b",
        "ROXXEL_CHECKPOINT_DIR": "gs://b/c",
        "ROXXEL_DATA_DIR": "/data",
        "ROXXEL_RESTART_ATTEMPT": "2",
    }
    assert run_info(env, run_name="lm", data_dir="runs/data") == RunInfo("lm-b", "gs://b/c", "/data", 2)


def test_without_the_launcher_the_defaults_apply_and_empty_counts_as_unset():
    assert run_info({"ROXXEL_RUN_NAME": ""}, run_name="lm", data_dir="runs/data") == RunInfo(
        "lm", None, "runs/data", None
    )


def test_the_output_directory_a_container_run_binds_is_read():
    info = run_info({"ROXXEL_OUTPUT_DIR": "/host/runs/local/lm/outputs"}, run_name="lm")
    assert info.output_dir == "/host/runs/local/lm/outputs"
    assert run_info({"ROXXEL_OUTPUT_DIR": ""}).output_dir is None


def test_a_bad_restart_attempt_is_named():
    with pytest.raises(ValueError, match="ROXXEL_RESTART_ATTEMPT='x' is not an integer"):
        run_info({"ROXXEL_RESTART_ATTEMPT": "x"})
