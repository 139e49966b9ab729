"""A deprecated name used inside the user's own imported module is shown, under Python's
default warning filters: Roxxel's deprecations are FutureWarnings (roxxel.deprecation), which
Python shows from any module, where a DeprecationWarning is shown only from ``__main__``.
Each call site warns once, as Python's default action does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

from roxxel.deprecation import RoxxelDeprecationWarning

_USER_LIBRARY = textwrap.dedent(
    """\
    from roxxel import Phase


    def phases():
        return [Phase(steps=2, batch_size=4, seq_len=8) for _ in range(3)]  # the original's keyword
    """
)


def test_a_deprecation_in_an_imported_module_is_shown_once_by_default(tmp_path):
    (tmp_path / "userlib.py").write_text(_USER_LIBRARY)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE")}
    env["PYTHONPATH"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", "import userlib; userlib.phases(); userlib.phases()"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    shown = [line for line in out.stderr.splitlines() if "is deprecated" in line]
    assert shown == [
        f"{tmp_path / 'userlib.py'}:5: RoxxelDeprecationWarning: Phase: batch_size is deprecated, "
        "use global_batch_size instead (same meaning)"
    ], out.stderr


def test_the_category_is_shown_by_default_and_can_be_made_an_error():
    assert issubclass(RoxxelDeprecationWarning, FutureWarning)
    assert not issubclass(RoxxelDeprecationWarning, DeprecationWarning)  # which the default filters hide
    from roxxel import Phase

    with warnings.catch_warnings():
        warnings.simplefilter("error", RoxxelDeprecationWarning)
        try:
            Phase(steps=2, batch_size=4, seq_len=8)
        except RoxxelDeprecationWarning as err:
            assert "use global_batch_size" in str(err)
        else:
            raise AssertionError("no RoxxelDeprecationWarning")
