"""``python -m tfdist`` runs the CLI."""

from __future__ import annotations

import sys

from tfdist.cli import main

sys.exit(main())
