"""``python -m trainstack``: the command line, as the ``trainstack`` entry point runs it."""

import sys

from trainstack.cli import main

sys.exit(main())
