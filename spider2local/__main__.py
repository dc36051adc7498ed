"""Allow ``python -m spider2local``."""

from spider2local.cli import main

main()
