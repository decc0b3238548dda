"""``python -m minilsm``: the same command line as the ``minilsm`` console script."""

from minilsm.cli import main

raise SystemExit(main())
