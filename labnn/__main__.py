"""`python -m labnn`: the command line (`labnn.cli`)."""

import sys

try:  # torch loads here: a Ctrl-C meanwhile is one line too, as everywhere in the CLI
    from labnn.cli import main
except KeyboardInterrupt:
    print("python -m labnn: interrupted while starting; nothing was done", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
