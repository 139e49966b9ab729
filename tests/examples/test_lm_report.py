"""The main job's closing text: the loss chart beside the sample (examples/lm/report.py)."""

import sys

import pytest

from support.paths import REPO

sys.path.insert(0, str(REPO / "examples/lm"))
from report import EVAL_MARK, TRAIN_MARK, loss_chart, side_by_side, text_lines  # noqa: E402


def test_chart_puts_the_highest_loss_top_left_and_the_lowest_bottom_right():
    lines = loss_chart([(10, 3.0), (20, 2.5), (30, 2.0)], [(30, 2.2)], width=10, height=5)
    assert len(lines) == 5 + 2
    rows = [line.split("|", 1)[1] for line in lines[:5]]
    assert rows[0][0] == TRAIN_MARK and rows[4][9] == TRAIN_MARK
    assert EVAL_MARK in rows[3] or EVAL_MARK in rows[4]
    assert lines[0].startswith(" 3.00") and lines[4].startswith(" 2.00")
    assert lines[-1].split() == ["step", "10", "30"]


def test_ceiling_keeps_early_losses_on_the_top_row():
    lines = loss_chart([(1, 6.0), (2, 3.0), (3, 2.0)], ceiling=3.3, width=6, height=4)
    assert lines[0].startswith(" 3.30") and lines[0].split("|")[1].startswith(TRAIN_MARK)


def test_chart_refuses_nothing_to_draw():
    with pytest.raises(ValueError, match="no finite loss"):
        loss_chart([(1, float("nan"))])


def test_side_by_side_aligns_the_right_column():
    text = side_by_side(["ab", "abcd"], ["x", "y", "z"], gap=1)
    assert text.split("\n") == ["ab   x", "abcd y", "     z"]


def test_text_lines_wrap_and_show_control_characters():
    assert text_lines("a\tb\x07" + "c" * 7, width=10) == ["a   b?ccc\\", "    cccc"]
    # A wrapped line goes on indented past its own indentation: never read as dedented code.
    assert text_lines("    x = f(" + "a" * 30, width=20) == [
        "    x = f(" + "a" * 9 + "\\",
        " " * 8 + "a" * 11 + "\\",
        " " * 8 + "a" * 10,
    ]
    # A run of trailing spaces wrapped into rows holding only the cut mark.
    assert text_lines("x" + " " * 20 + "\n" + " " * 12, width=5) == ["x", ""]
