"""`python -m fasttts.cli`: the `fasttts` command.

Guarded by `__name__`: vLLM starts tensor-parallel ranks with multiprocessing's "spawn", which
imports the main module again in each rank; the command must not run there."""

import sys

from fasttts.cli.parser import main

if __name__ == "__main__":
    sys.exit(main())
