"""Lesson 14's timings: the runs compared take their steps in turns, and each part shows its fastest time.

The seconds are scripted (a stand-in for ``timed_step`` runs the real step, then reports made-up times), so
the tests check which step is kept and in which order the trainers ran, not the machine's speed.
"""

import itertools

from grpo_edu.course.experiments import cost_of_a_step as cost


def _scripted_seconds(monkeypatch, totals):
    """Replace ``timed_step`` in the experiments module: run the step, report the next of ``totals`` as its
    time (a number: split evenly over the parts; a dict: those parts' seconds, 0 for the rest). Returns the list
    of trainers in the order they stepped."""
    real, order, script = cost.timed_step, [], iter(totals)

    def timed_step(trainer):
        metrics, _, tokens = real(trainer)
        order.append(trainer)
        total = next(script)
        if isinstance(total, dict):
            return metrics, {part: total.get(part, 0.0) for part in cost.PARTS}, tokens
        return metrics, {part: total / len(cost.PARTS) for part in cost.PARTS}, tokens

    monkeypatch.setattr(cost, "timed_step", timed_step)
    return order


def test_step_costs_in_turns_alternates_the_runs_and_keeps_each_ones_fastest_step(monkeypatch):
    # steps a1 b1 a2 b2 a3 b3: a's fastest is its 2nd (1.0), b's its 3rd (2.0); medians would be 3.0 and 4.0
    order = _scripted_seconds(monkeypatch, [3.0, 4.0, 1.0, 5.0, 9.0, 2.0])
    runs = {"a": dict(workload="adder", sampler="loop"), "b": dict(workload="adder", sampler="engine")}
    costs = cost.step_costs_in_turns(runs, steps=3, warmup=1, seed=0)
    first, second = order[0], order[1]
    assert first is not second
    assert order == [first, second] * 3                                   # in turns, not one run then the other
    assert costs["a"]["step_s"] == 1.0 and costs["b"]["step_s"] == 2.0
    assert costs["a"]["seconds"]["sampling"] == 1.0 / len(cost.PARTS)     # the parts of that same step
    assert costs["a"]["answer_tokens"] > 0 and costs["a"]["decoded_rows"] >= costs["a"]["answer_tokens"]


def test_a_pause_on_one_part_of_a_step_moves_no_ratio_of_parts(monkeypatch):
    # step 1's policy pass and step 2's sampling were each interrupted by the host: each part keeps its own
    # fastest (sampling 1.0 from step 1, policy 2.0 from step 2), so sampling / policy reads 0.5, as on a quiet
    # machine; the fastest whole step (step 2, 5.0) would read 3.0 / 2.0 = 1.5
    _scripted_seconds(monkeypatch, [{"sampling": 1.0, "policy": 6.0}, {"sampling": 3.0, "policy": 2.0}])
    costs = cost.step_costs_in_turns({"a": dict(workload="adder", sampler="engine")}, steps=2, warmup=1, seed=0)
    assert costs["a"]["seconds"]["sampling"] == 1.0 and costs["a"]["seconds"]["policy"] == 2.0
    assert costs["a"]["step_s"] == 3.0                                    # the step without the interruptions


def test_step_costs_of_one_run_is_the_same_measurement(monkeypatch):
    _scripted_seconds(monkeypatch, [2.0, 0.5, 3.0])
    one = cost.step_costs("adder", "engine", steps=3, warmup=1, seed=0)
    assert one["step_s"] == 0.5
    assert set(one) >= {"seconds", "flops", "memory", "pass_flops", "completion_length"}


def test_reuse_drift_takes_the_mus_in_turns_and_divides_the_fastest_step_by_mu(monkeypatch):
    # scripted in hundreds of seconds, so that the drift measurements' own (real) seconds, taken off, are small
    order = _scripted_seconds(monkeypatch, itertools.cycle([200.0, 300.0, 100.0, 150.0]))
    reuse = cost.reuse_drift("adder", (1, 2), steps=2, seed=0)
    assert order[0] is not order[1] and order == [order[0], order[1]] * 2
    # μ = 1 stepped 200 then 100; μ = 2 stepped 300 then 150: the fastest / μ is 100 and 75
    assert abs(reuse[1]["seconds_per_update"] - 100) < 2
    assert abs(reuse[2]["seconds_per_update"] - 150 / 2) < 2
    assert [len(step) for step in reuse[2]["drift"]] == [2, 2]            # μ updates measured per step
