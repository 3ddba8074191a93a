"""kcp versions: parsing, ordering, ranges, the supported set and unsafe side-by-side pairs."""

import pytest

from kcpshard.kcp.errors import VersionError
from kcpshard.kcp.versions import SemverRange, Version, known, side_by_side_safe


def test_parse_with_and_without_v_and_prerelease() -> None:
    assert Version.parse("v0.32.1") == Version(0, 32, 1)
    assert Version.parse("0.32.1") == Version(0, 32, 1)
    assert Version.parse("v0.33.0-rc.1") == Version(0, 33, 0, ("rc", "1"))
    assert str(Version.parse("v0.33.0-rc.1")) == "v0.33.0-rc.1"


@pytest.mark.parametrize("bad", ["", "v0.32", "v0.32.1.2", "vx.1.2", "v01.2.3", "v0.33.0-", "v0.33.0-rc..1"])
def test_parse_rejects_garbage(bad: str) -> None:
    with pytest.raises(VersionError):
        Version.parse(bad)


def test_semver_ordering_with_prereleases() -> None:
    ordered = [
        "v0.32.0",
        "v0.32.1",
        "v0.33.0-alpha.1",
        "v0.33.0-rc.1",
        "v0.33.0-rc.2",
        "v0.33.0-rc.10",
        "v0.33.0",
        "v0.33.1",
        "v1.0.0",
    ]
    versions = [Version.parse(v) for v in ordered]
    assert sorted(reversed(versions)) == versions
    assert Version.parse("v0.33.0-rc.1") < Version.parse("v0.33.0")


def test_range_bounds() -> None:
    r = SemverRange.parse(">=0.28.0 <0.33.0")
    assert "v0.28.0" in r
    assert "v0.32.9" in r
    assert "v0.27.9" not in r
    assert "v0.33.0" not in r


def test_prerelease_matches_as_its_release() -> None:
    # An rc of v0.33.0 carries v0.33's flags: it is outside "<0.33.0" and inside ">=0.33.0".
    assert "v0.33.0-rc.1" not in SemverRange.parse("<0.33.0")
    assert "v0.33.0-rc.1" in SemverRange.parse(">=0.33.0")


def test_never_matches_nothing() -> None:
    assert "v0.32.1" not in SemverRange.never()


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("v0.26.0", True),
        ("v0.32.1", True),
        ("v0.33.9", True),
        ("v0.33.0-rc.1", True),
        ("v0.25.9", False),
        ("v0.34.0", False),
        ("v1.0.0", False),
        ("garbage", False),
    ],
)
def test_known(version: str, ok: bool) -> None:
    assert known(version) is ok


def test_side_by_side_unsafe_across_storage_change_both_ways() -> None:
    ok, reason = side_by_side_safe("v0.27.3", "v0.28.0")
    assert not ok
    assert "v0.27.3 -> v0.28.0 crosses the storage change at v0.28.0" in reason
    ok, _ = side_by_side_safe("v0.28.1", "v0.27.3")  # a downgrade runs the old binary on new data
    assert not ok
    ok, _ = side_by_side_safe("v0.26.0", "v0.30.0")  # a jump over the boundary crosses it too
    assert not ok


def test_side_by_side_safe_elsewhere() -> None:
    assert side_by_side_safe("v0.32.0", "v0.32.1")[0]
    assert side_by_side_safe("v0.31.2", "v0.32.1")[0]
    assert side_by_side_safe("v0.28.0", "v0.29.0")[0]
    ok, reason = side_by_side_safe("v0.32.1", "v0.32.1")
    assert ok and reason
