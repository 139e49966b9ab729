"""``python -m roxxel`` runs the ``roxxel`` command."""

from roxxel.cli import main

main()
