"""`python -m labnn`: the command line (`labnn.cli`)."""

import signal
import sys

# torch loads while the CLI is imported (a few seconds). A Ctrl-C meanwhile is held back
# (an interrupt inside a compiled extension's import can abort Python), then answered
# with one line, as everywhere in the CLI; where signals cannot be held, it is caught.
HOLD = hasattr(signal, "pthread_sigmask")
STARTING = "python -m labnn: interrupted while starting; nothing was done"
try:
    if HOLD:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    from labnn.cli import main

    if HOLD and signal.SIGINT in signal.sigpending():
        raise KeyboardInterrupt
except KeyboardInterrupt:
    print(STARTING, file=sys.stderr)
    sys.exit(130)  # with the signal still held: nothing else is printed
if HOLD:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

sys.exit(main())
