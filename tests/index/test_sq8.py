"""store_vectors="sq8": the scalar quantizer of stored vectors (ockstore/_sq8.py; docs/FORMAT.md, "sq8")."""

import numpy as np
import pytest

from ockstore.quantizers.sq8 import SQ8_LEVELS, check_value_ranges, learn_value_ranges, sq8_decode, sq8_encode, sq8_steps


def test_learned_ranges_are_the_training_minimum_and_maximum():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((70_000, 5)) * [1, 10, 0.1, 3, 7] + [0, 5, -2, 100, 0]  # more rows than one step
    ranges = learn_value_ranges(X)
    assert ranges.dtype == np.float32 and ranges.shape == (2, 5)
    np.testing.assert_array_equal(ranges[0], X.astype(np.float32).min(axis=0))
    np.testing.assert_array_equal(ranges[1], X.astype(np.float32).max(axis=0))


def test_round_trip_error_is_at_most_half_a_step_inside_the_range():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 33)).astype(np.float32)
    ranges = learn_value_ranges(X)
    codes = sq8_encode(X, ranges)
    assert codes.dtype == np.uint8 and codes.shape == X.shape
    lo, step = sq8_steps(ranges)
    error = np.abs(sq8_decode(codes, ranges) - X)
    assert (error <= step / 2 * (1 + 1e-12)).all()
    # the nearest level, computed independently
    expected = np.clip(np.rint((X.astype(np.float64) - lo) / step), 0, SQ8_LEVELS)
    np.testing.assert_array_equal(codes, expected)


def test_range_edges_clipping_and_ties():
    ranges = np.array([[0.0, -1.0, 2.0], [255.0, 1.0, 2.0]], dtype=np.float32)  # steps 1, 2/255, 0
    X = np.array([[0.0, -1.0, 2.0],      # lowest values: code 0
                  [255.0, 1.0, 2.0],     # highest: code 255
                  [-7.0, -3.0, 9.0],     # below the range: clipped to 0; a constant dimension stores lo
                  [300.0, 4.0, -9.0],    # above: clipped to 255
                  [2.5, 0.0, 2.0],       # 2.5: halfway between levels 2 and 3, ties to even -> 2
                  [3.5, 0.0, 2.0]])      # 3.5 -> 4
    codes = sq8_encode(X, ranges)
    np.testing.assert_array_equal(codes[:, 0], [0, 255, 0, 255, 2, 4])
    np.testing.assert_array_equal(codes[:, 1], [0, 255, 0, 255, 128, 128])  # 0.0 is level 127.5: ties to even
    np.testing.assert_array_equal(codes[:, 2], [0, 0, 0, 0, 0, 0])
    decoded = sq8_decode(codes, ranges)
    np.testing.assert_array_equal(decoded[:2], X[:2])  # the ends of every range are represented exactly
    assert (decoded[:, 2] == 2.0).all()


def test_check_value_ranges():
    good = check_value_ranges([[0.0, 1.0], [2.0, 3.0]], 2)
    assert good.dtype == np.float32 and good.flags.c_contiguous
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        check_value_ranges(np.zeros((2, 2)), 3)
    with pytest.raises(ValueError, match="dimension 1 has lowest value"):
        check_value_ranges([[0.0, 5.0], [1.0, 4.0]], 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        check_value_ranges([[0, np.nan], [1, 4]], 2)
    with pytest.raises(TypeError, match="floats"):
        check_value_ranges(np.zeros((2, 2), dtype=np.int64), 2)
