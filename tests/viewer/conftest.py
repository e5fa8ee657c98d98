import importlib.util
import shutil

import pytest

from tests.viewer.gloo_job import make_event, py_spy


@pytest.fixture(scope="session")
def gloo_timeline(tmp_path_factory):
    """A timeline root holding one event: real py-spy dumps of a real stalled gloo job."""
    if py_spy() is None:
        pytest.skip("py-spy is not installed")
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    root = tmp_path_factory.mktemp("timeline")
    ready = tmp_path_factory.mktemp("ready")
    make_event(root / "job" / "20261122T120000Z", ready)
    yield root
    shutil.rmtree(root, ignore_errors=True)
