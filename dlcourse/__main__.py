"""`python -m dlcourse`: the same as the `dlcourse` command (see dlcourse/cli/)."""
import sys

from .cli import main

sys.exit(main())
