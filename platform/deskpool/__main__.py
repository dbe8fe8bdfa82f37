"""``python -m deskpool`` is the ``deskpool`` command."""

import sys

from deskpool.cli import main

sys.exit(main())
