"""`python -m fasttts.cli`: the `fasttts` command."""

import sys

from fasttts.cli.parser import main

sys.exit(main())
