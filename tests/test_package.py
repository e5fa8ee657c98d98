"""What a new user reads and installs agrees with the code (issue 11, item 5)."""

import os
import re

import pytest

from diag.common import options
from diag.common.units import parse_duration

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_numpy_is_a_dependency():
    # torch's wheels do not require numpy; without it torch warns at import in every rank.
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert any(re.match(r"numpy\b", d) for d in deps), deps


def test_readme_states_the_default_hang_timeout_it_ships_with():
    with open(os.path.join(ROOT, "README.md")) as f:
        intro = f.read().split("## What `make demo` shows")[0]
    default_s = parse_duration(options.HANG_TIMEOUT.default, "--hang-timeout")
    assert f"{default_s:.0f} s by default" in intro and "within a minute" not in intro
