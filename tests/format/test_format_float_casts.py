"""Float arrays keep their numbers (#49): a cast to the dataset's dtype that would change a value's
meaning is refused, naming the document, the value and the dtype, and nothing is written.

Before, after a float32 array had set the dtype, a later 1e5 was stored as inf in float16, 1e300
as inf in float32, and bfloat16 rounded, silently; a float64 first array was refused outright
whatever its values (float64 after a float32 first array was narrowed without a word).
"""

import logging

import ml_dtypes
import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.format import DatasetWriter, DtypeMismatchError

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize(
    "first, later, stored_as",
    [
        (np.ones(3, np.float16), np.array([1.0, 1e5], np.float32), "float16"),
        (np.ones(3, np.float32), np.array([1e300]), "float32"),
        (np.ones(3, np.float16), np.array([70_000]), "float16"),  # an integer past float16's range
        (np.ones(3, np.float16), np.array([1e5], BF16), "float16"),
    ],
    ids=["1e5-float16", "1e300-float32", "int-float16", "bfloat16-float16"],
)
def test_a_finite_value_that_would_become_inf_is_refused_even_with_dtype(tmp_path, first, later, stored_as):
    for kwargs in ({}, {"dtype": stored_as}):
        path = tmp_path / "x.rox"
        with pytest.raises(
            DtypeMismatchError,
            match=rf"^document 1: {later.dtype.name} value .* is beyond {stored_as}'s range and would be stored as inf; ",
        ):
            Roxxel(str(path)).write([first, later], **kwargs)
        assert not path.exists()


def test_the_overflow_names_a_dtype_that_holds_the_value_or_says_to_scale(tmp_path):
    with pytest.raises(DtypeMismatchError, match=r"\(at index 1\).*; pass dtype='float32'$"):
        Roxxel(str(tmp_path / "a.rox")).write([np.ones(2, np.float16), np.array([1.0, 1e5], np.float32)])
    with pytest.raises(DtypeMismatchError, match=r"scale or clip them \(float32, the widest stored float"):
        Roxxel(str(tmp_path / "b.rox")).write([np.array([1e39])])  # float64 first: float32, too small


@pytest.mark.parametrize(
    "first, later, value, stored",
    [
        (np.ones(2, BF16), np.array([1.001], np.float32), "1.0010000467300415", "1.0"),
        (np.ones(2, np.float16), np.array([0.1], np.float32), "0.10000000149011612", "0.0999755859375"),
        (np.ones(2, np.float16), np.array([2049]), "2049", "2048.0"),  # an integer past the mantissa
        (np.ones(2, np.float32), np.array([2**24 + 1]), "16777217", "16777216.0"),
        (np.zeros(2), np.array([0.1]), "0.1", "0.10000000149011612"),  # float64: float32 dataset
        (np.ones(2, np.float16), np.array([1e-10]), "1e-10", "0.0"),  # underflow to zero
    ],
    ids=["float32-bfloat16", "float32-float16", "int-float16", "int-float32", "float64-float32", "underflow"],
)
def test_a_value_that_rounds_in_the_dtype_the_first_array_chose_is_refused(tmp_path, first, later, value, stored):
    path = tmp_path / "x.rox"
    with pytest.raises(DtypeMismatchError) as e:
        Roxxel(str(path)).write([first, later])
    message = str(e.value)
    assert message.startswith(f"document 1: {later.dtype.name} value {value} (at index 0) would be stored as {stored}")
    assert "the dtype the first array chose; pass dtype=" in message and "to round on purpose" in message
    assert len(message.splitlines()) == 1 and not path.exists()


def test_the_refusal_says_how_to_keep_the_value_where_float32_can(tmp_path):
    with pytest.raises(
        DtypeMismatchError, match=r"pass dtype='float16' to round on purpose, or dtype='float32' to keep it$"
    ):
        Roxxel(str(tmp_path / "a.rox")).write([np.ones(2, np.float16), np.array([2049])])
    with pytest.raises(DtypeMismatchError, match=r"\(no stored float holds it exactly: float32 is the widest\)$"):
        Roxxel(str(tmp_path / "b.rox")).write([np.ones(2, np.float16), np.array([0.1])])


def test_an_explicit_dtype_rounds_and_says_so_once(tmp_path, caplog):
    docs = [np.array([0.1, 0.2]), np.array([1.001], np.float32), np.array([2049])]
    with caplog.at_level(logging.WARNING, logger="roxxel.format"):
        Roxxel(str(tmp_path / "x.rox")).write(docs, dtype="float16")
    said = [r.getMessage() for r in caplog.records if "rounded" in r.getMessage()]
    assert said == [
        "document 0: float64 values rounded to float16, as dtype='float16' asks (0.1 became 0.0999755859375); said once"
    ]
    ds = Roxxel(str(tmp_path / "x.rox"))
    for k, d in enumerate(docs):
        np.testing.assert_array_equal(ds[k], d.astype(np.float16))
    # DatasetWriter's dtype is always the caller's choice: the same.
    with DatasetWriter(str(tmp_path / "d" / "dataset.json"), dtype="bfloat16") as w:
        w.add_document(np.array([1.001], np.float32))
        with pytest.raises(DtypeMismatchError, match="beyond bfloat16's range"):
            w.add_document(np.array([1e39]))


def test_values_kept_exactly_pass_nan_and_inf_included(tmp_path):
    """What the dtype holds is stored, whatever the array's dtype: float64 arrays (first or later)
    whose values float32 holds, integers the mantissa holds, NaN and infinities (as they were)."""
    docs = [
        np.array([0.5, -2.0, 3.25]),  # float64 first: a float32 dataset
        np.array([np.nan, np.inf, -np.inf, 1e-45, -0.0], np.float32),
        np.array([2**24, -(2**24), 7], np.int64),
        np.array([1.5], np.float16),
        np.array([1.0, 2.0], BF16),
    ]
    Roxxel(str(tmp_path / "x.rox")).write(docs)
    ds = Roxxel(str(tmp_path / "x.rox"))
    assert ds.dtype == np.float32
    for k, d in enumerate(docs):
        np.testing.assert_array_equal(ds[k], d.astype(np.float32))
    assert np.signbit(ds[1][-1])


def test_arrays_of_the_datasets_dtype_are_not_checked(tmp_path, monkeypatch):
    """The common case costs nothing: an array already in the dtype is written as it is."""
    import roxxel.format.dataset_writer as dw

    monkeypatch.setattr(dw, "_cast_changes", lambda *a, **k: pytest.fail("checked an array of the dataset's dtype"))
    Roxxel(str(tmp_path / "x.rox")).write([np.full(1000, 1e5, np.float32)] * 3)
