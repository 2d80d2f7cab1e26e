"""Tests for autokernel/core/interrupts.py: every stop signal held back inside a critical section, raised at its end."""

import os
import signal
import time

import pytest

from autokernel.core.interrupts import InterruptGuard, Interrupted


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_inside_a_critical_section_wait_for_its_end(signum):
    before = signal.getsignal(signal.SIGHUP)      # SIG_IGN under nohup, SIG_DFL in a terminal
    guard = InterruptGuard()
    steps = []
    with guard:
        with pytest.raises(Interrupted) as caught:
            with guard.critical():
                os.kill(os.getpid(), signum)
                steps.append("committed")
                steps.append("recorded")
        assert steps == ["committed", "recorded"] and caught.value.signum == signum
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
            time.sleep(5)
    assert signal.getsignal(signal.SIGHUP) is before
