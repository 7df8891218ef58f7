"""The scale warning's advice (issue 21 item 5): it names the symptom and both choices instead of
telling every user to rerun with --standardize (measured: on simulated draws whose column units
carry the noise scales, --standardize was worse on 3 of 5 draws; benchmarks/RESULTS.md)."""

import numpy as np

from bnsl_cli.stats import exact_scale_warning, scale_warning


def test_no_warning_below_the_ratio():
    assert scale_warning(np.array([1.0, 50.0]), ["a", "b"]) is None


def test_warning_names_the_spread_and_both_choices():
    text = scale_warning(np.array([0.5, 1.0, 200.0]), ["a", "b", "c"])
    assert text is not None
    assert "400-fold" in text and "c sd 200" in text and "a sd 0.5" in text
    assert "depends on their units" in text
    assert "--standardize" in text and "compare both" in text
    assert "rerun with --standardize" not in text
    assert "\n" not in text


def test_exact_warning_uses_the_same_text():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=200), 1000 * rng.normal(size=200)])
    text = exact_scale_warning([X[:100], X[100:]], ["x", "y"])
    assert text is not None and "compare both" in text and text.startswith("the columns' spreads differ")
