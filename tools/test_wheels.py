"""Install each wheel into a fresh virtual environment of its own Python, with no C compiler to be found, and run the
test suite against the installed package (`make test-wheels`).

    python tools/test_wheels.py --pythons "PY1 PY2 ..." WHEEL... [-- PYTEST_ARGS...]

For each wheel (e.g. ockstore-0.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl) the interpreter whose
version matches its tag (cp312: 3.12) is taken from --pythons; build/test-wheels/<tag> becomes a new virtual
environment of it; with PATH holding only that environment's bin/ and CC=false (no compiler can be found, so nothing
can be built from source), the wheel and its test extras are installed from binary wheels only
(`--only-binary=:all:`), and tools/test_installed.py runs the suite against it. Prints one line per wheel (its
tag, the Python, pytest's closing line) and exits non-zero when any wheel failed or had no Python.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPILERS = ("gcc", "cc", "clang", "c99", "zig", "g++", "c++")


def python_tag(python):
    """'cp312' for a CPython 3.12 interpreter."""
    out = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_wheel(wheel, python, pytest_args):
    """(passed, pytest's closing line) for one wheel."""
    tag = wheel.name.split("-")[2]
    venv = REPO / "build" / "test-wheels" / tag
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=str(venv / "bin"), CC="false", CXX="false")
    found = [c for c in COMPILERS if shutil.which(c, path=env["PATH"])]
    if found:
        return False, f"a compiler is on PATH: {', '.join(found)}"
    vpython = str(venv / "bin" / "python")
    subprocess.run([vpython, "-m", "pip", "install", "-q", "--only-binary=:all:", f"{wheel}[test]"], env=env,
                   check=True)
    run = subprocess.Popen([vpython, str(REPO / "tools" / "test_installed.py"), vpython, *pytest_args], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in run.stdout:  # shown as it comes, kept for the closing line
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = run.wait()
    closing = [ln.strip().strip("= ") for ln in lines if re.search(r"\d+ (passed|failed|errors?)\b", ln)]
    return code == 0, (closing[-1] if closing else f"exit code {code}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythons", required=True, help="the interpreters, separated by spaces")
    parser.add_argument("wheels", nargs="+", type=Path)
    args = parser.parse_args(ours)
    pythons = {python_tag(p): p for p in args.pythons.split()}
    results = []
    for wheel in args.wheels:
        tag = wheel.name.split("-")[2]
        python = pythons.get(tag)
        if python is None:
            results.append((wheel.name, "-", False, f"no Python for {tag} among {', '.join(sorted(pythons))}"))
            continue
        print(f"test-wheels: {wheel.name} with {python}", flush=True)
        passed, summary = test_wheel(wheel, python, pytest_args)
        results.append((wheel.name, python, passed, summary))
    print("\ntest-wheels:")
    for name, python, passed, summary in results:
        print(f"  {'ok  ' if passed else 'FAIL'} {name} ({python}): {summary}")
    return 0 if results and all(r[2] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
