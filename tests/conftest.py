"""Fixtures of more than one folder: the images `make test` builds."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kcpshard_testkit.image import ImageRef, build_image


@dataclass(frozen=True)
class Images:
    product: ImageRef
    test: ImageRef  # the product plus the stand-in kcp (`kcpshard-fake-kcp`)


@pytest.fixture(scope="session")
def images() -> Images:
    """The images of `hack/image.sh` (`make test` builds them first; cached by a key of what goes in)."""
    return Images(build_image("product"), build_image("test"))
