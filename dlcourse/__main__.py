"""`python -m dlcourse`: the same as the `dlcourse` command (see dlcourse/cli.py)."""
import sys

from .cli import main

sys.exit(main())
