"""Allow ``python -m spider2local``."""

from spider2local.cli.app import main

main()
