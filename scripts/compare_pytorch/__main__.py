import sys

from scripts.support.compare_pytorch.cli import main

sys.exit(main())
