"""Every hooked entry point forwards its arguments and result unchanged: with
and without the hook, and from a library constructor before the hook set up."""

import os

import pytest

from tests.kernel_hook.conftest import BUILD, HOOK, read_regions, run_prog
from tests.kernel_hook.test_build import HOOKED


def _checked(out):
    lines = out.stdout.split()
    return {name for ok, name in zip(lines[::2], lines[1::2]) if ok == "ok"}


@pytest.mark.parametrize("preload", [False, True], ids=["plain", "hooked"])
def test_every_entry_point_forwards_args_and_result(built, tmp_path, preload):
    out = run_prog("snippets", shm_dir=str(tmp_path), preload=preload)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FAIL" not in out.stdout
    assert _checked(out) == HOOKED
    assert out.stderr == ""
    assert bool(read_regions(str(tmp_path))) == preload


def test_snippets_from_a_library_constructor(built, tmp_path):
    snippets = os.path.join(BUILD, "progs", "libsnippets.so")
    out = run_prog("nocuda", shm_dir=str(tmp_path), preload=False,
                   env={"LD_PRELOAD": f"{HOOK} {snippets}", "SNIPPETS_IN_CTOR": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert _checked(out) == HOOKED and "FAIL" not in out.stdout
    [region] = read_regions(str(tmp_path))
    assert region.records  # the hook started from inside the constructor, and recorded
