"""Run the ``govern`` CLI as ``python -m cli``."""

from cli.app import main

main()
