"""`python -m dlcourse.cli`: the same as `python -m dlcourse` and the `dlcourse` command."""
import sys

from . import main

sys.exit(main())
