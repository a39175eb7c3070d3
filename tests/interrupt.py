"""Children that a test interrupts (Ctrl-C, SIGINT) must take the signal as a
terminal's foreground job does. A shell without job control starts its background
jobs with SIGINT ignored, and an ignored signal stays ignored across exec: under a
test run started so (`.ci/run &` from a script), Python would not raise
KeyboardInterrupt in the child, nor would bash run its trap, and the test would hang
or fail for a reason not in the code under test. `preexec_fn=ctrl_c_as_a_terminal`
gives the child the default disposition back."""

from __future__ import annotations

import signal


def ctrl_c_as_a_terminal() -> None:
    """For `subprocess.Popen(preexec_fn=...)`: SIGINT at its default in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
