"""Run the test suite against an installed ockstore (a wheel or a clang build in a virtual environment of its own),
never against the source tree: `make test-wheels` (tools/test_wheels.py) and `make test-clang` use it.

    python tools/test_installed.py VENV_PYTHON [PYTEST_ARGS...]

Copies tests/, README.md (tests/docs runs its blocks) and the demo data the tests read (demo/data) to a fresh folder
under build/ (inside the repository, so the real datasets are found as from the source tree), checks that VENV_PYTHON
imports ockstore from its own site-packages there (prints ockstore.__file__), then runs `VENV_PYTHON -I -m pytest` in that
folder: isolated mode puts neither the current folder nor PYTHONPATH on sys.path, and the copy holds no ockstore
package, so the only ockstore it can import is the installed one. The caller's environment is passed on as it is
(test-wheels empties PATH of compilers).
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The one pytest marker of the suite (as in pyproject.toml, which the copy cannot see).
PYTEST_INI = """[pytest]
addopts = -ra
markers =
    slow: tests that take more than a few seconds (real data, fuzzing)
"""

CHECK_IMPORT = """
import sysconfig
from pathlib import Path
import ockstore
print("ockstore imported from", ockstore.__file__, "- SIMD level", ockstore._kernels.simd_level())
site = Path(sysconfig.get_paths()["purelib"]).resolve(), Path(sysconfig.get_paths()["platlib"]).resolve()
here = Path(ockstore.__file__).resolve()
assert any(s in here.parents for s in site), f"ockstore comes from {here}, not from this environment's {site[0]}"
"""


def main(argv):
    if len(argv) < 1:
        raise SystemExit(__doc__)
    python, pytest_args = os.path.abspath(argv[0]), argv[1:]  # absolute, not resolved: a venv's python is a link
    (REPO / "build").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="installed-tests-", dir=REPO / "build"))
    try:
        shutil.copytree(REPO / "tests", folder / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copytree(REPO / "demo" / "data", folder / "demo" / "data")
        shutil.copy2(REPO / "README.md", folder / "README.md")
        (folder / "pytest.ini").write_text(PYTEST_INI)
        subprocess.run([python, "-I", "-c", CHECK_IMPORT], cwd=folder, check=True)
        done = subprocess.run([python, "-I", "-m", "pytest", "-p", "no:cacheprovider", *pytest_args, "tests"],
                              cwd=folder)
        return done.returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
