"""``python -m infra up|down|status``: see infra/cli.py."""

import sys

from infra.cli import main

sys.exit(main(sys.argv[1:]))
