"""The fastest of interchangeable forms, timed on live calls."""

from __future__ import annotations

import time

from indexer.fastest import Fastest


def _sleeper(seconds: float, calls: list[str], name: str):  # type: ignore[no-untyped-def]
    def form(value: int) -> int:
        calls.append(name)
        time.sleep(seconds)
        return value * 2

    return form


def test_each_form_runs_in_turn_for_the_trials_then_the_fastest_median_runs_alone() -> None:
    calls: list[str] = []
    forms = {"slow": _sleeper(0.004, calls, "slow"), "quick": _sleeper(0.0, calls, "quick")}
    fastest = Fastest(trials=3)
    assert [fastest.call("key", forms, n) for n in range(6)] == [0, 2, 4, 6, 8, 10]
    assert sorted(calls) == ["quick"] * 3 + ["slow"] * 3
    assert fastest.choices() == {"key": "quick"}
    calls.clear()
    assert [fastest.call("key", forms, n) for n in range(4)] == [0, 2, 4, 6]
    assert calls == ["quick"] * 4 and {n: len(s) for n, s in fastest.timings("key").items()} == {"slow": 3, "quick": 3}


def test_keys_choose_apart_and_forget_starts_the_trials_again() -> None:
    calls: list[str] = []
    fastest = Fastest(trials=2)
    one = {"a": _sleeper(0.003, calls, "a"), "b": _sleeper(0.0, calls, "b")}
    other = {"a": _sleeper(0.0, calls, "a"), "b": _sleeper(0.003, calls, "b")}
    for _ in range(4):
        fastest.call(1, one, 0)
        fastest.call(2, other, 0)
    assert fastest.choices() == {1: "b", 2: "a"}
    fastest.forget()
    assert fastest.choices() == {} and fastest.timings(1) == {}
    fastest.call(1, one, 0)
    assert {n: len(s) for n, s in fastest.timings(1).items()} == {"a": 1, "b": 0}
