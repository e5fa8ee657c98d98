"""Builds the kernel hook (make -C kernel_hook) as part of the package build.

pyproject.toml holds the metadata; this file only adds a build step, so
`pip install .` and wheels ship diag/lib/libxpu_timer_hook.so (and the NCCL
profiler plugin beside it). A C++17
compiler and make are all it needs. Without them the package still installs,
without the hook, and says so: xpu_timer_launch then runs workers unhooked.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
HOOK_SO = os.path.join("diag", "lib", "libxpu_timer_hook.so")
PROFILER_SO = os.path.join("diag", "lib", "libxpu_nccl_profiler.so")   # the NCCL profiler plugin (docs/link.md)


class BuildPyWithHook(build_py):
    def run(self):
        super().run()
        src = os.path.join(ROOT, "kernel_hook")
        if not os.path.isdir(src):
            return  # an sdist without the C++ sources
        try:
            subprocess.run(["make", "-s", "-C", src], check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            self.warn(f"kernel hook not built ({exc}); install make and a C++17 compiler "
                      f"and run `make -C kernel_hook` to get it")
            return
        for lib in (HOOK_SO, PROFILER_SO):
            dest = os.path.join(self.build_lib, lib)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, lib), dest)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for the platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithHook}, distclass=BinaryDistribution)
