"""Tests for autokernel/core/stopwatch.py: parts timed where they run add up in the recording around them, and
nowhere without one."""

import pytest

from autokernel.core import stopwatch


class Clock:
    """A clock that moves only when told: the sums are exact, not timed."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_parts_add_up_per_name_in_the_order_they_began_and_say_their_counts():
    clock = Clock()
    with stopwatch.recording(stopwatch.Stopwatch(clock)) as watch:
        with stopwatch.timed("regions"):
            for _ in range(3):
                with stopwatch.timed("region timing"):
                    clock.now += 0.5
            clock.now += 1.0
        with stopwatch.timed("Inductor"):
            clock.now += 2.0
    assert watch.seconds == {"regions": 2.5, "region timing": 1.5, "Inductor": 2.0}
    assert watch.calls == {"region timing": 3, "regions": 1, "Inductor": 1}
    # The outer part is said before its own parts; a part that ran more than once says how many times.
    assert watch.parts() == "regions 2.5 s, region timing 1.5 s (3x), Inductor 2.0 s"
    assert watch.parts(("Inductor", "judge")) == "Inductor 2.0 s"       # a part that never ran is not said


def test_a_part_that_raises_is_still_counted_and_the_error_goes_on():
    clock = Clock()
    with stopwatch.recording(stopwatch.Stopwatch(clock)) as watch:
        with pytest.raises(ValueError), stopwatch.timed("judge"):
            clock.now += 4.0
            raise ValueError("the pick could not judge")
    assert watch.seconds == {"judge": 4.0} and watch.calls["judge"] == 1


def test_outside_a_recording_nothing_is_kept_and_an_inner_recording_keeps_its_own():
    clock = Clock()
    outer = stopwatch.Stopwatch(clock)
    with stopwatch.timed("torch profiler"):      # profile.py, extract, the loop: no recording, nothing kept
        clock.now += 1.0
    with stopwatch.recording(outer):
        with stopwatch.recording(stopwatch.Stopwatch(clock)) as inner, stopwatch.timed("Inductor"):
            clock.now += 1.0
        with stopwatch.timed("judge"):
            clock.now += 3.0
    assert inner.seconds == {"Inductor": 1.0} and outer.seconds == {"judge": 3.0}
    with stopwatch.timed("judge"):
        clock.now += 1.0
    assert outer.seconds == {"judge": 3.0}
