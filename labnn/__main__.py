import sys

from labnn.cli import main

sys.exit(main())
