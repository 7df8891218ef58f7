"""Shared set-up of the whole suite."""

import signal

# A shell that starts the suite in the background (``pytest … &``, some CI runners) leaves SIGINT
# ignored, and an ignored signal stays ignored in every child process: the Ctrl-C tests' ``bnsl``
# processes would then never see their SIGINT. Handled here, it is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
