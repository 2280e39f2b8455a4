"""``python -m scripts.generated [--check]``: every generated part of the docs written, or
checked; the parts are scripts.support.generated's."""

import sys

from scripts.support.generated import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
