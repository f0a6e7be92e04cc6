"""`python -m vit` runs the `vit` command."""

import sys

from vit.cli import main

sys.exit(main())
