"""``python -m core`` entry point."""
import sys

from core.cli import main

if __name__ == "__main__":  # spawned compile processes import this module as __mp_main__
    sys.exit(main())
