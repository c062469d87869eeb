"""Build the compiled extension ockstore._kernels (ockstore/_kernels.pyx, the SIMD kernels of ockstore/kernels/simd.c and
the thread pool of ockstore/kernels/pool.c). Needs a C compiler that takes gcc's options: gcc or clang (MinGW on
Windows). The kernels' threads are their own (pthreads, Win32 threads on Windows): no OpenMP runtime is needed, and
none is linked.

Environment overrides:
  OCKSTORE_MARCH=native  add -march=native (faster on the build machine, not portable); any value is passed as -march=
"""

import glob
import os
import sys

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


# The flags of the SIMD kernels' translation unit, on top of the extension's (ockstore/kernels/simd.c says why; `make
# cross-check` passes the same): no fused multiply-add the source does not write, so every SIMD level rounds alike,
# and no wrapping signed arithmetic, which keeps compilers from vectorising counted loops.
SIMD_FLAGS = ["-ffp-contract=off", "-fno-wrapv"]
SIMD_SOURCE = "ockstore/kernels/simd.c"


class BuildExt(build_ext):
    def build_extension(self, ext):
        # kernels/simd.c is compiled on its own, with SIMD_FLAGS (setuptools gives every source of an extension the same
        # flags), and linked into the extension.
        ext.extra_objects = self.compiler.compile(
            [SIMD_SOURCE], output_dir=self.build_temp, include_dirs=ext.include_dirs,
            extra_postargs=ext.extra_compile_args + SIMD_FLAGS, depends=ext.depends)
        super().build_extension(ext)

    def build_extensions(self):
        march = os.environ.get("OCKSTORE_MARCH", "")
        for ext in self.extensions:
            # no fused multiply-add the source does not write, in the Cython loops too (a build with -march=native
            # must round as every other build does: the inverted file's list terms are products added to sums)
            ext.extra_compile_args += ["-O3", "-fno-math-errno", "-ffp-contract=off", "-Wno-unreachable-code"]
            if march:
                ext.extra_compile_args.append(f"-march={march}")
            if os.name != "nt":
                # the pool's pthreads (in libpthread before glibc 2.34, which a manylinux2014 wheel must run on)
                ext.extra_compile_args.append("-pthread")
                ext.extra_link_args.append("-pthread")
        print(f"ockstore: building with -march={march or 'default'}", file=sys.stderr)
        super().build_extensions()


# The compiled kernels, one extension: the codec (encoding, decoding, training products), search (the scan with
# top-k) and the inverted file (coarse assignment, probing, the scan of probed lists), their parts included by
# _kernels.pyx; the SIMD kernels of every level (kernels/simd.c) linked in, and the thread pool (kernels/pool.c,
# compiled with the extension's flags).
extensions = [
    Extension(
        "ockstore._kernels",
        ["ockstore/_kernels.pyx", "ockstore/kernels/pool.c"],
        include_dirs=[np.get_include(), "ockstore"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
        # The C sources the kernels include: editing one rebuilds them (cythonize tracks the .pxi files itself).
        depends=sorted(glob.glob("ockstore/kernels/*.h")) + [SIMD_SOURCE, "ockstore/kernels/pool.c"],
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        # The one place the kernels' compiler directives are set: they index only what the Python layers checked.
        compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False, "cdivision": True,
                             "initializedcheck": False},
    ),
    cmdclass={"build_ext": BuildExt},
)
