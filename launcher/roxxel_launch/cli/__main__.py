"""``python -m roxxel_launch.cli``: the ``roxxel-launch`` command."""

from roxxel_launch.cli import main

main()
