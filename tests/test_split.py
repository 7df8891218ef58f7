"""bnsl_cli.split: every row exactly once, no empty shard, sizes and group modes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import InputDataError
from bnsl_cli.split import (
    equal_sizes,
    group_indices,
    largest_remainder_sizes,
    split_indices,
    split_table_file,
)


def assert_partition(shards, n):
    assert all(s.size > 0 for s in shards), "empty shard"
    allrows = np.concatenate(shards)
    assert allrows.size == n
    np.testing.assert_array_equal(np.sort(allrows), np.arange(n))
    for s in shards:
        assert np.all(np.diff(s) > 0)  # sorted, no duplicate inside a shard


@st.composite
def n_and_p(draw):
    n = draw(st.integers(1, 400))
    p = draw(st.integers(1, min(n, 40)))
    return n, p


@settings(max_examples=150, deadline=None)
@given(n_and_p(), st.sampled_from(["random", "contiguous"]), st.integers(0, 2**32))
def test_equal_modes_partition_rows(np_, mode, seed):
    n, p = np_
    shards = split_indices(n, p, mode=mode, seed=seed)
    assert len(shards) == p
    assert_partition(shards, n)
    sizes = [s.size for s in shards]
    assert max(sizes) - min(sizes) <= 1
    if mode == "contiguous":
        np.testing.assert_array_equal(np.concatenate(shards), np.arange(n))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 2000),
    st.lists(st.floats(0.01, 10.0), min_size=1, max_size=12),
    st.integers(0, 1000),
)
def test_sizes_mode_partition_and_proportions(n, weights, seed):
    q = np.array(weights) / np.sum(weights)
    try:
        shards = split_indices(n, mode="sizes", sizes=q, seed=seed)
    except InputDataError:
        # only legitimate when some shard's quota is below one row (or more shards than rows)
        assert len(q) > n or np.any(q * n < 1)
        return
    assert len(shards) == len(q)
    assert_partition(shards, n)
    sizes = np.array([s.size for s in shards])
    assert np.all(np.abs(sizes - q * n) < 1)  # largest-remainder rounding never misses by a row


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 12), min_size=1, max_size=300))
def test_group_mode_partition_by_value(values):
    groups = np.array([str(v) for v in values])
    shards = split_indices(len(values), mode="group", groups=groups)
    assert_partition(shards, len(values))
    keys = [int(groups[s[0]]) for s in shards]
    assert keys == sorted(set(values))  # one shard per value, numeric order
    for s, k in zip(shards, keys):
        assert set(groups[s]) == {str(k)}


def test_largest_remainder_examples():
    np.testing.assert_array_equal(largest_remainder_sizes(10, [0.5, 0.3, 0.2]), [5, 3, 2])
    np.testing.assert_array_equal(largest_remainder_sizes(7466, [0.5, 0.3, 0.2]), [3733, 2240, 1493])
    # 10 * (1/3) each: floors 3,3,3 and the leftover row goes to the first shard
    np.testing.assert_array_equal(largest_remainder_sizes(10, [1 / 3, 1 / 3, 1 / 3]), [4, 3, 3])
    np.testing.assert_array_equal(largest_remainder_sizes(7, [0.1, 0.45, 0.45]), [1, 3, 3])


def test_sizes_rejects_bad_proportions_and_empty_shards():
    with pytest.raises(ValueError, match="sum to 1"):
        largest_remainder_sizes(100, [0.5, 0.4])
    with pytest.raises(ValueError, match="> 0"):
        largest_remainder_sizes(100, [1.2, -0.2])
    with pytest.raises(InputDataError, match="no row"):
        largest_remainder_sizes(10, [0.96, 0.04])
    assert largest_remainder_sizes(10, [0.5, 0.5 + 5e-7]).sum() == 10  # tolerance 1e-6


def test_more_participants_than_rows_is_an_error():
    with pytest.raises(InputDataError, match="non-empty"):
        split_indices(3, 4)
    with pytest.raises(InputDataError):
        equal_sizes(0, 1)


def test_random_split_is_seeded():
    a = split_indices(100, 3, seed=5)
    b = split_indices(100, 3, seed=5)
    c = split_indices(100, 3, seed=6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert [s.size for s in a] == [34, 33, 33]


def test_group_values_sorted_numerically_or_as_text():
    vals, idx = group_indices(["10", "9", "10", "2.5"])
    assert vals == ["2.5", "9", "10"]
    assert [i.tolist() for i in idx] == [[3], [1], [0, 2]]
    vals, _ = group_indices(["b", "a", "10", "b"])
    assert vals == ["10", "a", "b"]


def test_group_participants_must_match():
    with pytest.raises(InputDataError, match="distinct"):
        split_indices(4, 3, mode="group", groups=["a", "b", "a", "b"])
    assert len(split_indices(4, 2, mode="group", groups=["a", "b", "a", "b"])) == 2


def test_split_table_file_keeps_text_and_drops_group_column(tmp_path):
    src = tmp_path / "in.csv"
    text = "a, b ,site\n1e3,0.10,x\n-2,7,y\n3.0,1E-2,x\n0.1,5,y\n"
    src.write_text(text)
    res = split_table_file(src, mode="group", by="site")
    assert res.header == ("a", "b")
    assert res.groups == ("x", "y")
    assert res.texts[0] == "a,b\n1e3,0.10\n3.0,1E-2\n"
    assert res.texts[1] == "a,b\n-2,7\n0.1,5\n"
    assert src.read_text() == text  # input untouched


def test_split_table_file_random_covers_every_row(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((57, 4))
    src = tmp_path / "in.csv"
    src.write_text("p,q,r,s\n" + "".join(",".join(repr(v) for v in row) + "\n" for row in X.tolist()))
    res = split_table_file(src, 5, seed=1)
    lines = [ln for t in res.texts for ln in t.splitlines()[1:]]
    assert sorted(lines) == sorted(src.read_text().splitlines()[1:])
    assert [len(t.splitlines()) - 1 for t in res.texts] == [12, 12, 11, 11, 11]


def test_split_table_file_group_needs_existing_column(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(InputDataError, match="no column named 'site'"):
        split_table_file(src, mode="group", by="site")
