"""Damage stops at the first copy (docs/FORMAT.md rule C15, issue 28): a commit that copies rows out of a segment —
compaction, the size-tiered merges, retrain, the training commit, a distributed build's commit — checks the CRC of
every section it reads as it reads it, and a damaged segment makes it raise FormatError naming the file, with nothing
committed; verify() keeps reporting the damage afterwards instead of passing on a fresh copy.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ockstore
from ockstore.errors import FormatError
from collection_model import P, vectors
from collection_model import q, quantizers  # noqa: F401 - pytest fixtures


def damage(path, section, row=3, replace_with_row=0):
    """Overwrite row ``row`` of ``section`` of the file ``path`` in place with the bytes of row ``replace_with_row``
    (finite, plausible values: only the section's CRC tells), keeping the header and its CRC."""
    with ockstore.storage.open_file(path) as mf:
        info = mf.section_info(section)
        rows = info["shape"][0]
        row_bytes = info["length"] // rows
        source = bytes(mf.sections[section].reshape(rows, -1).view(np.uint8)[replace_with_row])
    assert len(source) == row_bytes
    before = bytes(mf_bytes(path, info["offset"] + row * row_bytes, row_bytes))
    if source == before:
        source = bytes(b ^ 1 for b in source)  # identical rows: flip the low bits instead
    with open(path, "r+b") as f:
        f.seek(info["offset"] + row * row_bytes)
        f.write(source)


def mf_bytes(path, offset, size):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def listing(folder):
    """{name: (size, mtime_ns)} of the folder: a commit that commits nothing leaves it as it was."""
    return {name: (os.stat(folder / name).st_size, os.stat(folder / name).st_mtime_ns) for name in os.listdir(folder)
            if name != ockstore.collection.names.LOCK_NAME}


def segment_path(collection, number=0):
    return os.path.join(collection.path, collection.info()["segment_files"][number]["file"])


def assert_nothing_committed(c, folder, before, generation, path):
    assert c.generation == generation
    assert listing(folder) == before, "the failed commit left or removed files"
    with ockstore.open_collection(folder) as reader:
        assert reader.generation == generation
        with pytest.raises(FormatError, match="CRC mismatch"):
            reader.verify()  # the damage is still reported: not laundered


def test_compact_and_retrain_refuse_a_segment_with_an_overwritten_stored_vector_row_C15(q, tmp_path):
    """The issue's case: one stored-vector row overwritten; compact() and retrain() raise FormatError naming the
    segment file and the section, commit nothing, and verify() still reports the damage."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, store_vectors="float16", merge_factor=100) as c:
        for seed in range(3):
            c.add(vectors(80, seed))
        c.delete([5, 6])
        path = segment_path(c, 1)
        damage(path, "vectors")
        with pytest.raises(FormatError, match="CRC mismatch"):
            c.verify()
        before, generation = listing(folder), c.generation
        for operation in (c.compact, c.retrain):
            with pytest.raises(FormatError) as caught:
                operation()
            message = str(caught.value)
            assert repr(path) in message and "section 'vectors'" in message and "nothing was committed" in message
            assert_nothing_committed(c, folder, before, generation, path)
        c.add(vectors(5, 9))  # a commit that does not copy the segment still works
        assert c.generation == generation + 1


@pytest.mark.parametrize("section", ["codes", "norms", "ids", "vectors"])
def test_merges_check_every_section_they_copy_C15(quantizers, tmp_path, section):
    """Codes (4-bit blocks for K = 16), norm terms, ids, stored vectors: a damaged row of any fails the automatic
    merge of the add that would copy it; the add commits nothing and its new segment is removed."""
    q = quantizers["ockm"]
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, store_vectors="float32", norm_encoding="f32", merge_factor=2) as c:
        c.add(vectors(40, 1))
        path = segment_path(c)
        with ockstore.storage.open_file(path) as mf:
            name = section if section in mf.sections else "code_blocks"
        damage(path, name, row=1)
        before, generation = listing(folder), c.generation
        with pytest.raises(FormatError, match=rf"{os.path.basename(path)}.*CRC mismatch: section '{name}'"):
            c.add(vectors(40, 2))  # two segments of one tier: merged in this commit
        assert_nothing_committed(c, folder, before, generation, path)


def test_ivf_merges_check_their_segments_C15(tmp_path):
    learn = vectors(800, 1)
    ivf = ockstore.IVF(4, ockstore.PQ(5, n_codewords=16, n_iter=2, seed=0), seed=0).fit(learn)
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, ivf, store_vectors="float32", merge_factor=100) as c:
        c.add(vectors(60, 2))
        c.add(vectors(60, 3))
        path = segment_path(c, 0)
        damage(path, "ids", row=10, replace_with_row=11)
        before, generation = listing(folder), c.generation
        with pytest.raises(FormatError, match="CRC mismatch: section 'ids'"):
            c.compact()
        assert_nothing_committed(c, folder, before, generation, path)


def test_retrain_reads_only_the_stored_vectors_and_ids_C15(q, tmp_path):
    """retrain re-encodes from the stored vectors: damaged codes are not copied (the commit writes new ones, and
    verify passes after it), damaged stored vectors are refused."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, store_vectors="float32") as c:
        c.add(vectors(100, 1))
        path = segment_path(c)
        with ockstore.storage.open_file(path) as mf:
            codes = "codes" if "codes" in mf.sections else "code_blocks"
        damage(path, codes, row=0, replace_with_row=1)
        with pytest.raises(FormatError, match="CRC mismatch"):
            c.verify()
        c.retrain()
        c.verify()
        path = segment_path(c)
        damage(path, "vectors", row=99, replace_with_row=2)  # the last row: found at the end of the pass
        before, generation = listing(folder), c.generation
        with pytest.raises(FormatError, match="CRC mismatch: section 'vectors'"):
            c.retrain()
        assert_nothing_committed(c, folder, before, generation, path)


def test_the_training_commit_refuses_damaged_stored_vectors_C15(tmp_path):
    """The training that follows the add crossing train_size re-encodes every live row: a damaged file of stored
    vectors fails it (wait_trained raises the error naming the file), the collection stays untrained at the add's
    generation, and the training's pending files are gone."""
    folder = tmp_path / "c"
    quantizer = ockstore.PQ(5, n_codewords=16, n_iter=2, seed=0)
    with ockstore.create_collection(folder, quantizer, store_vectors="float32", train_size=300) as c:
        c.add(vectors(200, 1))
        path = segment_path(c)
        damage(path, "vectors", row=150)
        generation = c.generation
        c.add(vectors(150, 2))  # committed at once, untrained; the training beside it fails
        with pytest.raises(FormatError, match=rf"{os.path.basename(path)}.*CRC mismatch: section 'vectors'.*nothing "
                                              "was committed"):
            c.wait_trained(timeout=300)
        assert not c.trained and c.generation == generation + 1 and len(c) == 350
        assert not [name for name in os.listdir(folder) if name.startswith(".pending.")]


def test_commit_segments_checks_what_it_copies_C15(q, tmp_path):
    """A distributed build's commit: the ids of each pending file (read to check them) are CRC-checked, and the merges
    it runs check the segments they copy."""
    folder = tmp_path / "c"
    with ockstore.create_collection(folder, q, store_vectors="float32", merge_factor=2) as c:
        pending = ockstore.collection.write_pending_segment(folder, c.segment_spec, vectors(30, 1),
                                                            np.arange(30) + 100)
        damage(pending.path, "ids", row=4, replace_with_row=5)
        before, generation = listing(folder), c.generation
        with pytest.raises(FormatError, match=r"\.pending\..*CRC mismatch: section 'ids'"):
            c.commit_segments([pending], merge=False)
        assert c.generation == generation and listing(folder) == before
        os.unlink(pending.path)
        c.add(vectors(30, 2))
        damage(segment_path(c), "vectors", row=7)
        pending = ockstore.collection.write_pending_segment(folder, c.segment_spec, vectors(30, 3),
                                                            np.arange(30) + 100)
        with pytest.raises(FormatError, match="CRC mismatch: section 'vectors'"):
            c.commit_segments([pending])  # merged with the damaged segment of the same tier
        assert os.path.exists(pending.path)  # left to the caller, as after any refused commit
