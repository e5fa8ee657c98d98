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


@pytest.mark.parametrize("text", ["1e400", "1e30", "8761h", "99999999999999999999"])
def test_a_duration_is_at_most_a_year(text):
    with pytest.raises(UnitError, match=r"^--hang-timeout: .* is too long; at most 8760h \(a year\)$"):
        parse_duration(text, "--hang-timeout")
    assert parse_duration("8760h", "--hang-timeout") == 365 * 24 * 3600.0


@pytest.mark.parametrize("text", ["1e400", "1e30", "9223372036854775808", "8388608T"])
def test_a_size_fits_an_int64_and_whole_numbers_stay_exact(text):
    with pytest.raises(UnitError, match=r"^--size: .* is too large; at most 9223372036854775807 \(an int64\)$"):
        parse_size(text, "--size")
    assert parse_size("9007199254740993", "--size") == 9007199254740993    # not rounded through a float
    with pytest.raises(UnitError, match=r"^--size: '2G' is too large; at most 1G$"):
        parse_size("2G", "--size", 1 << 30, "1G")
    assert parse_size("1G", "--size", 1 << 30, "1G") == 1 << 30
