"""The seconds a caller is told to wait for its rate-limit window to reset."""

from __future__ import annotations

import pytest

from deskpool.api.ratelimit import WINDOW_SECONDS, seconds_until


@pytest.mark.parametrize("now", [100.002, 100.004, 100.009, 12345.678, 0.0])
def test_a_window_opened_now_resets_in_at_most_its_length(now: float) -> None:
    # (now + 60.0) - now is 60.000000000007 for these: the ceiling alone said 61.
    assert seconds_until(now + WINDOW_SECONDS, now) == WINDOW_SECONDS


@pytest.mark.parametrize(("left", "told"), [(59.2, 60), (30.0, 30), (0.4, 1), (0.0, 1), (-3.0, 1)])
def test_what_is_left_is_rounded_up_to_a_whole_second_and_at_least_one(
    left: float, told: int
) -> None:
    assert seconds_until(1000.0 + left, 1000.0) == told
