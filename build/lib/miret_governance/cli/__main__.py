"""Run the ``govern`` CLI as ``python -m miret_governance.cli``."""

from miret_governance.cli.app import main

main()
