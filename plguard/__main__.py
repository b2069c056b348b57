"""``python -m plguard``: the same entry point as the ``plguard`` command."""

import sys

from plguard.cli import main

sys.exit(main())
