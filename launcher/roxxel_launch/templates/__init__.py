"""Jinja2 templates for roxxel-launch, installed as ``roxxel_launch.templates``.

Structure only: every value is computed in ``roxxel_launch.render`` and reaches the output
through the ``q`` (JSON-quoting) filter.
"""
