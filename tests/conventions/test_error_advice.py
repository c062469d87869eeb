"""Errors that name the fix (issue 21): a collection folder given to open_index, a closed index or collection (how to
reopen it), a search that asks for another metric (fixed when the quantizer is fitted)."""

from __future__ import annotations

import numpy as np
import pytest

import ockstore
from helpers import gaussian_mixture


@pytest.fixture(scope="module")
def learn():
    return gaussian_mixture(400, 8, seed=4)


@pytest.fixture(scope="module")
def q(learn):
    return ockstore.PQ(2, n_codewords=16, n_iter=2, seed=0).fit(learn)


def test_open_index_of_a_collection_folder_says_use_open_collection(tmp_path, q):
    ockstore.create_collection(tmp_path / "c", q).close()
    with pytest.raises(ValueError, match=r"is a collection folder: use ockstore\.open_collection"):
        ockstore.open_index(tmp_path / "c")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="is not a regular file"):  # a folder that is no collection: as before
        ockstore.open_index(tmp_path / "plain")


def test_a_closed_index_or_collection_says_how_to_reopen_it(tmp_path, q, learn):
    path = tmp_path / "i.ock"
    ockstore.Index.from_vectors(q, learn).save(path)
    index = ockstore.open_index(path)
    index.close()
    with pytest.raises(ValueError, match=rf"closed index: reopen it with ockstore\.open_index\({str(path)!r}\)"):
        index.search(learn[:1], 1)
    memory = ockstore.Index.from_vectors(q, learn)
    memory.close()
    with pytest.raises(ValueError, match="closed index .*built in memory"):
        len(memory)
    folder = str(tmp_path / "c")
    writer = ockstore.create_collection(folder, q)
    writer.close()
    with pytest.raises(ValueError, match=rf"closed collection: reopen it with ockstore\.open_collection\("
                                         rf"{folder!r}, 'a'\)"):
        writer.add(learn[:1])
    reader = ockstore.open_collection(folder)
    reader.close()
    with pytest.raises(ValueError, match=rf"ockstore\.open_collection\({folder!r}\)$"):
        reader.search(learn[:1], 1)


def test_search_metric_is_fixed_when_the_model_is_fitted(tmp_path, q, learn):
    """metric= in a search: its own metric is accepted (same results), another is a ValueError that says the metric is
    fixed when the quantizer is fitted and how to get one of that metric, for indexes, IVF indexes and collections."""
    ivf = ockstore.IVF(4, ockstore.PQ(2, n_codewords=16, n_iter=2, seed=0), seed=0).fit(learn)
    collection = ockstore.create_collection(tmp_path / "c", q)
    collection.add(learn)
    for searchable, what in [(ockstore.Index.from_vectors(q, learn), "index"),
                             (ockstore.Index.from_vectors(ivf, learn), "index"), (collection, "collection")]:
        D, I = searchable.search(learn[:3], 4)
        D2, I2 = searchable.search(learn[:3], 4, metric="l2")
        assert np.array_equal(I, I2) and np.array_equal(D, D2)
        with pytest.raises(ValueError, match=rf"metric: this {what} ranks by 'l2', fixed when its quantizer was "
                                             rf"fitted.*fit a quantizer with metric='cosine'"):
            searchable.search(learn[:3], 4, metric="cosine")
    collection.close()
