"""Helpers shared by the tests: model and data factories, test doubles, paths.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so tests import these as
``from support.lm import make_model``. The programs that tests spawn as subprocesses live in
``support/workers/``; each puts ``tests/`` on its own ``sys.path`` first.
"""
