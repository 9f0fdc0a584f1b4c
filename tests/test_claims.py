"""check_claim: prints a line that reads the same on every machine, raises with the value when false."""

import json

import pytest

from grpo_edu.course.aids.claims import LOG_ENV, ClaimFailed, check_claim


def test_holding_claim_prints_statement_and_bound_not_the_value(capsys):
    assert check_claim("accuracy rose by at least 30 points", 0.4123, at_least=0.30) is None   # no echo in a notebook
    out = capsys.readouterr().out
    assert out == "✓ claim holds: accuracy rose by at least 30 points (needs ≥ 0.3)\n"
    assert "0.4123" not in out


def test_two_sided_and_boolean_claims(capsys):
    check_claim("in the band", 0.5, at_least=0.35, at_most=0.55)
    check_claim("same weights", True)
    assert capsys.readouterr().out.splitlines() == ["✓ claim holds: in the band (needs ≥ 0.35 and ≤ 0.55)",
                                                     "✓ claim holds: same weights"]


@pytest.mark.parametrize("value, bounds", [(0.29, {"at_least": 0.3}), (0.56, {"at_most": 0.55}),
                                           (0.2, {"at_least": 0.35, "at_most": 0.55}), (False, {})])
def test_failing_claim_raises_with_the_measured_value(value, bounds, capsys):
    with pytest.raises(ClaimFailed, match="claim does not hold") as err:
        check_claim("the claim", value, **bounds)
    assert str(value if isinstance(value, bool) else f"{value:.6g}") in str(err.value)
    assert "✓" not in capsys.readouterr().out


def test_tensor_values_are_accepted(capsys):
    torch = pytest.importorskip("torch")
    check_claim("a tensor", torch.tensor(0.7), at_least=0.5)
    assert capsys.readouterr().out.startswith("✓ claim holds: a tensor")


@pytest.mark.parametrize("kwargs, arg", [({"value": 0.5}, "at_least/at_most"),
                                         ({"value": float("nan"), "at_least": 0}, "value"),
                                         ({"value": "high", "at_least": 0}, "value"),
                                         ({"value": True, "at_least": 0}, "at_least/at_most")])
def test_a_claim_that_cannot_fail_is_refused(kwargs, arg):
    with pytest.raises(ValueError, match=f"^{arg}:"):
        check_claim("something", **kwargs)


def test_claims_are_logged_for_the_margin_measurement(tmp_path, monkeypatch, capsys):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(LOG_ENV, str(log))
    check_claim("kept", 0.9, at_least=0.5)
    check_claim("broken", 0.1, at_least=0.5)                       # measuring: recorded, not raised
    assert capsys.readouterr().out.splitlines() == ["✓ claim holds: kept (needs ≥ 0.5)",
                                                     "✗ claim FAILS: broken (needs ≥ 0.5)"]
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["statement"], e["value"], e["holds"]) for e in entries] == [("kept", 0.9, True), ("broken", 0.1, False)]
