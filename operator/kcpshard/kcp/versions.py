"""kcp versions: semver parsing and ordering, ranges, the supported set and unsafe side-by-side pairs.

kcp tags releases `vMAJOR.MINOR.PATCH` with optional pre-releases (`v0.33.0-rc.1`); ordering follows
semver 2.0.0 section 11 (a pre-release sorts before its release). For *range matching* a pre-release
takes the flags of the release it precedes: kcp cuts its release candidates from the release branch, so
`v0.33.0-rc.1` already has v0.33.0's flag set (the root-shard-kubeconfig change lands before the tag).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from kcpshard.kcp.errors import VersionError

_SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"  # core
    r"(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"  # pre-release, build metadata
)


@functools.total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version:
        m = _SEMVER.match(text.strip())
        if m is None:
            raise VersionError(f"not a kcp version: {text!r} (expected e.g. v0.32.1 or v0.33.0-rc.1)")
        pre = tuple(m.group(4).split(".")) if m.group(4) else ()
        if any(not p for p in pre):
            raise VersionError(f"not a kcp version: {text!r} (empty pre-release part)")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre)

    @property
    def core(self) -> Version:
        """The release this version is or precedes (pre-release dropped)."""
        return Version(self.major, self.minor, self.patch)

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # No pre-release sorts after any pre-release of the same core (flag 1 vs 0).
        parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, parts)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        text = f"v{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{'.'.join(self.pre)}" if self.pre else text


def parse(text: str | Version) -> Version:
    return text if isinstance(text, Version) else Version.parse(text)


_OPS = (">=", "<=", ">", "<", "=")


@dataclass(frozen=True)
class SemverRange:
    """A conjunction of comparators, e.g. ``">=0.28.0 <0.33.0"``; the empty text matches nothing.

    Pre-releases are matched by their core version (see the module docstring).
    """

    text: str
    comparators: tuple[tuple[str, Version], ...]

    @classmethod
    def parse(cls, text: str) -> SemverRange:
        comps: list[tuple[str, Version]] = []
        for token in text.split():
            op = next((o for o in _OPS if token.startswith(o)), "=")
            comps.append((op, Version.parse(token[len(op) :] if token.startswith(op) else token)))
        return cls(text, tuple(comps))

    @classmethod
    def never(cls) -> SemverRange:
        return cls("", ())

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, str | Version):
            return False
        if not self.comparators:
            return False
        v = parse(version).core
        for op, bound in self.comparators:
            ok = {
                ">=": v >= bound,
                "<=": v <= bound,
                ">": v > bound,
                "<": v < bound,
                "=": v == bound,
            }[op]
            if not ok:
                return False
        return True

    def __str__(self) -> str:
        return self.text or "(no version)"


SUPPORTED = SemverRange.parse(">=0.26.0 <0.34.0")


def known(version: str | Version) -> bool:
    """True for versions the flag table supports (v0.26.0 up to v0.33.x); other versions stall the shard."""
    try:
        return parse(version) in SUPPORTED
    except VersionError:
        return False


@dataclass(frozen=True)
class StorageBoundary:
    """From release `at` on the stored data changes: binaries older than `at` cannot read it."""

    at: Version
    reason: str


# Version pairs that must not run side by side on one store. A roll crossing a boundary, in either
# direction, must run in the Single shape (or stall): during blue/green the older binary would read
# data the newer one has already rewritten. roll/start.py stalls a BlueGreen roll across one with
# UnsafeSideBySide (docs/design.md#unsafe-version-pairs). The v0.28 entry comes from the project's
# starting design as an example of such a change; it has not been traced to a kcp commit here, and a
# pair found unsafe later is added as a row.
STORAGE_BOUNDARIES: tuple[StorageBoundary, ...] = (
    StorageBoundary(
        Version(0, 28, 0),
        "kcp v0.28 changes the storage version of its stored objects; a v0.27 binary cannot read data "
        "written by v0.28",
    ),
)


def side_by_side_safe(from_v: str | Version, to_v: str | Version) -> tuple[bool, str]:
    """Whether a slot of `from_v` and one of `to_v` may run at the same time on one store, and why."""
    a, b = parse(from_v).core, parse(to_v).core
    low, high = (a, b) if a <= b else (b, a)
    for boundary in STORAGE_BOUNDARIES:
        if low < boundary.at and high >= boundary.at:
            return False, (
                f"{parse(from_v)} -> {parse(to_v)} crosses the storage change at {boundary.at}: "
                f"{boundary.reason}"
            )
    if a == b:
        return True, f"same release {a}"
    return True, f"{parse(from_v)} and {parse(to_v)} share the storage format"
