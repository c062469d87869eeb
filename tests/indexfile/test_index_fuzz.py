"""Mutation fuzzing of index files (docs/FORMAT.md I1-I9 on top of the container's R1-R23, V1-V7 of inverted
files, F1-F3 of fast-scan files: the seed files of K = 4 hold code_blocks, those of K = 32 byte codes; S1-S5 of
segments by reference, with edits of their meta map's keys): the harness of tests/support/fuzz_index.py runs in a
subprocess over >= 10,000 mutants of a small valid file, so that a hard crash of the reader fails the test instead of
killing pytest.
"""

from __future__ import annotations

import pytest

import shutil

from fuzz_index import make_ivf_seed_file, make_seed_file, make_segment_seed_file
from helpers import run_json_script


# --------------------------------------------------------------------------------------------------------------------
# the tests


def fuzz_report(valid, n_random, seed, *, companions=(), meta_edits=0):
    """The report of the harness over mutants of the file ``valid``, checked for what every run must show: no failure,
    >= 10,000 cases, every truncation refused and the original opening, the index layer's own checks reached
    ("bad meta", CRC mismatches), every FormatError naming the file first. ``companions``: files copied into the
    folder of the mutants (a segment's quantizer file); ``meta_edits``: cases of edits of meta's keys. Returns
    (report, files that opened)."""
    size = len(valid.read_bytes())
    work = valid.parent / "work"
    work.mkdir()
    for path in companions:
        shutil.copy(path, work / path.name)
    report = run_json_script("fuzz_index.py", "--file", valid, "--workdir", work, "--random", n_random, "--seed", seed,
                             "--meta-edits", meta_edits, timeout=900)
    assert report["n_failures"] == 0 and report["cases"] >= 10_000, report
    counts = report["counts"]
    assert counts["truncate:refused"] == size and counts["original:ok"] == 1
    checks = report["checks"]
    assert checks.get("bad meta", 0) > 0 and checks.get("CRC mismatch", 0) > 0, checks
    assert "?" not in checks, checks  # every FormatError names the file first
    return report, sum(n for key, n in counts.items() if key.endswith(":ok"))


@pytest.mark.slow
def test_fuzz_index_file_in_subprocess_I1_to_I9(tmp_path):
    """I1-I9 with R1-R23: >= 10,000 mutated index files are refused with FormatError or (only where the change is in
    the header and harmless) open, verify and search; no other exception and no crash; every truncation and every
    change after the header is refused."""
    report, opened_ok = fuzz_report(make_seed_file(tmp_path / "valid.ock"), 4000, 3)
    counts = report["counts"]
    assert counts.get("flip1:refused", 0) > 0 and counts.get("header:refused", 0) > 0
    # The index layer was reached and did its part: refusals by its own checks, and searches of files that opened.
    assert opened_ok >= 1 and report["searches"] >= 2 * opened_ok, (report["searches"], opened_ok)


@pytest.mark.slow
def test_fuzz_byte_code_index_file_in_subprocess_I1_to_I9(tmp_path):
    """I1-I9 for an index of byte codes (K = 32), now that the seed of K = 4 is a fast-scan file."""
    report, opened_ok = fuzz_report(make_seed_file(tmp_path / "valid.ock", n_codewords=32), 2500, 5)
    assert opened_ok >= 1 and report["searches"] >= 2 * opened_ok, (report["searches"], opened_ok)


@pytest.mark.slow
def test_fuzz_ivf_index_file_in_subprocess_V1_to_V7(tmp_path):
    """V1-V7 with I1-I9 and R1-R23: mutated inverted-file index files are refused with FormatError or open, verify
    and search (with the default n_probe and with every list) without any other exception or crash; every
    truncation and every change after the header is refused."""
    report, opened_ok = fuzz_report(make_ivf_seed_file(tmp_path / "valid.ock"), 3000, 4)
    assert opened_ok >= 1 and report["searches"] >= 4 * opened_ok, (report["searches"], opened_ok)


@pytest.mark.slow
@pytest.mark.parametrize("ivf", [False, True], ids=["flat", "ivf"])
def test_fuzz_segment_by_reference_in_subprocess_S1_to_S5(tmp_path, ivf):
    """S1-S5 with I1-I9 (V1-V7) and R1-R23: mutants of a segment by reference (fast-scan blocks, sq8 vectors), next
    to its quantizer file, and edits of every key of its meta map and of meta 'model' (the file name: paths, hidden
    names, the mutant itself; the fingerprint: one digit off, upper case), are refused with FormatError naming the
    segment, or open with the right model, verify and search; no other exception and no crash."""
    seed_folder = tmp_path / "seed"
    seed_folder.mkdir()
    valid = make_segment_seed_file(seed_folder, n_codewords=4 if not ivf else 32, ivf=ivf)
    report, opened_ok = fuzz_report(tmp_path / "seed" / "segment.ock", 4500, 6 + ivf,
                                    companions=[seed_folder / "quantizer.ockq"], meta_edits=3000)
    assert str(valid).endswith("segment.ock")
    checks, counts = report["checks"], report["counts"]
    assert counts.get("meta:refused", 0) > 0 and counts.get("meta:ok", 0) > 0, counts
    for check in ("model mismatch", "missing model", "unexpected section"):
        assert checks.get(check, 0) > 0, (check, checks)
    assert opened_ok >= 1 and report["searches"] >= 2 * opened_ok, (report["searches"], opened_ok)
