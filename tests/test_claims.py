"""`check_claim`: the verdict on a claim a notebook's prose makes about its own run."""

import pytest
import torch

from labnn.exercises.claims import ClaimFailed, check_claim


@pytest.fixture(params=["fast", "full"])
def mode(request, monkeypatch):
    monkeypatch.setenv("LABNN_FAST", "1" if request.param == "fast" else "0")
    return request.param


def test_a_claim_that_holds_prints_its_evidence_in_both_modes(mode, capsys):
    assert check_claim("XL beats the transformer", True, "1.62 vs 1.71") is None  # no stray cell output
    assert capsys.readouterr().out == "✅ claim holds: XL beats the transformer (1.62 vs 1.71)\n"


def test_a_false_claim_fails_at_full_size_even_with_a_caveat(monkeypatch):
    monkeypatch.setenv("LABNN_FAST", "0")
    with pytest.raises(ClaimFailed, match=r"full size.*XL beats the transformer \(1.75 vs 1.71\)"):
        check_claim("XL beats the transformer", False, "1.75 vs 1.71", fast_caveat="full run: 1.62 vs 1.71")


def test_a_false_claim_in_fast_mode_needs_a_caveat(monkeypatch, capsys):
    monkeypatch.setenv("LABNN_FAST", "1")
    with pytest.raises(ClaimFailed, match="no caveat given"):
        check_claim("XL beats the transformer", False, "2.65 vs 2.64")
    check_claim("XL beats the transformer", False, "2.65 vs 2.64", fast_caveat="Full size: 1.62 vs 1.71.")
    out = capsys.readouterr().out
    assert "does NOT show that XL beats the transformer (2.65 vs 2.64)" in out
    assert "Full size: 1.62 vs 1.71." in out and "✅" not in out


@pytest.mark.parametrize("holds", [torch.tensor(True), 1, None, "yes"])
def test_holds_must_be_a_bool(mode, holds):
    with pytest.raises(TypeError, match="holds must be a bool"):
        check_claim("a claim", holds, "evidence")


def test_a_verdict_is_one_line_of_prose(monkeypatch, capsys):
    """A verdict wraps on the site as prose: runs of spaces or a newline in the claim, the
    evidence or the caveat would make it a row of columns (site.js), kept whole and cut off."""
    check_claim("relative beats\nabsolute", True, "64: 2.08 vs 2.49  128: 2.08 vs 2.50")
    assert capsys.readouterr().out == (
        "✅ claim holds: relative beats absolute (64: 2.08 vs 2.49 128: 2.08 vs 2.50)\n")
    monkeypatch.setenv("LABNN_FAST", "1")
    check_claim("a  claim", False, "1  2", fast_caveat="Full size:\n  3.")
    assert capsys.readouterr().out.count("  ") == 0
