import pytest

from diag.common.units import UnitError, parse_duration, parse_size


@pytest.mark.parametrize("text, seconds", [
    ("300", 300.0), ("30s", 30.0), ("5m", 300.0), ("250ms", 0.25), ("1.5h", 5400.0), (10, 10.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text, "--hang-timeout") == seconds


@pytest.mark.parametrize("text", ["0", "-5", "abc", "10 parsecs", ""])
def test_parse_duration_names_the_option(text):
    with pytest.raises(UnitError, match="^--hang-timeout: "):
        parse_duration(text, "--hang-timeout")


@pytest.mark.parametrize("text, size", [("4096", 4096), ("64M", 64 << 20), ("1G", 1 << 30),
                                        ("1GiB", 1 << 30), ("2k", 2048)])
def test_parse_size(text, size):
    assert parse_size(text, "--size") == size


@pytest.mark.parametrize("text", ["0", "1Q", "big"])
def test_parse_size_names_the_option(text):
    with pytest.raises(UnitError, match="^--size: "):
        parse_size(text, "--size")
