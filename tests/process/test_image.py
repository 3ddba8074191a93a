"""The product image (Dockerfile, built by hack/image.sh with no registry) starts as its USER, uid 65532: the
CLI runs and kopf's peer id, from getpass.getuser(), finds a passwd entry (the old image crashed there). It
holds no test kit; the test image, built on it, does.

The containers run with `buildah run --isolation chroot` on the storage the script built into: no cluster,
no containerd to start, and the image's own config (USER, PATH) applies. The first run builds the images
(about 5 minutes); later runs find their tars in the cache and take seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from kcpshard_testkit.image import ImageRef, build_image

pytestmark = pytest.mark.timeout(1800)


def test_this_machine_can_build_the_image() -> None:
    """Said as a failure, not a skip: `make test` (hack/bootstrap.sh) installs both, as root."""
    assert shutil.which("buildah") and shutil.which("debootstrap"), (
        "install the Debian packages buildah, debootstrap"
    )
    assert os.geteuid() == 0, "building the image needs root (debootstrap, buildah's storage)"


# getpass.getuser() reads these before the passwd file; a pod sets none of them.
NO_USER_ENV = ["env", "-u", "LOGNAME", "-u", "USER", "-u", "LNAME", "-u", "USERNAME"]
USER = "65532:65532"


@pytest.fixture(scope="module")
def product() -> ImageRef:
    return build_image("product")


@pytest.fixture(scope="module")
def test_image(product: ImageRef) -> ImageRef:
    return build_image("test")


def buildah(image: ImageRef, *args: str) -> str:
    return subprocess.run(image.buildah(*args), capture_output=True, text=True, check=True).stdout.strip()


class Container:
    def __init__(self, image: ImageRef) -> None:
        self.image = image
        # a name of its own: hack/image.sh removes working containers left by killed builds
        self.id = buildah(
            image, "from", "--pull-never", "--name", f"test-image-{uuid.uuid4().hex[:8]}", image.local_name
        )

    def run(self, *argv: str, user: str = USER) -> subprocess.CompletedProcess[str]:
        command = self.image.buildah("run", "--isolation", "chroot", "--user", user, self.id, "--", *argv)
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    def remove(self) -> None:
        subprocess.run(self.image.buildah("rm", self.id), capture_output=True, check=False)


@pytest.fixture(scope="module")
def container(product: ImageRef) -> Iterator[Container]:
    # one for the module: with vfs storage each container is a full copy of the image
    c = Container(product)
    yield c
    c.remove()


def test_the_image_runs_as_uid_65532_with_the_cli_as_entrypoint(product: ImageRef) -> None:
    form = "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}"
    config = buildah(product, "inspect", "--format", form, product.local_name)
    assert config == f"{USER} [kcpshard]"
    assert product.tar.is_file() and product.tar.stat().st_size > 0


def test_the_operator_cli_runs(container: Container) -> None:
    done = container.run("kcpshard", "operator", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kcpshard operator")


def test_uid_65532_has_a_user_name_for_kopf(container: Container) -> None:
    # kopf's peering.detect_own_id is where the operator crashed on an image without the passwd entry
    code = (
        "import getpass, os; from kopf._core.engines.peering import detect_own_id; "
        "print(os.getuid(), getpass.getuser(), detect_own_id(manual=False))"
    )
    done = container.run(*NO_USER_ENV, "python3", "-c", code)
    assert done.returncode == 0, done.stderr
    uid, name, peer = done.stdout.split()
    assert (uid, name) == ("65532", "kcpshard") and peer.startswith("kcpshard@")
    # the same check on a uid without an entry fails as the old image did: the check can tell
    code = "import getpass; getpass.getuser()"
    other = container.run(*NO_USER_ENV, "python3", "-c", code, user="65533:65533")
    assert other.returncode != 0 and "uid not found: 65533" in other.stderr


def test_the_product_image_has_no_test_kit(container: Container) -> None:
    done = container.run("python3", "-c", "import kcpshard_testkit")
    assert done.returncode != 0 and "No module named 'kcpshard_testkit'" in done.stderr
    assert container.run("sh", "-c", "command -v kcpshard-fake-kcp").returncode != 0


def test_the_test_image_has_the_test_kit_and_the_stand_in_kcp(test_image: ImageRef) -> None:
    c = Container(test_image)
    try:
        done = c.run("python3", "-c", "import kcpshard_testkit, kcpshard")
        assert done.returncode == 0, done.stderr
        fake = c.run("kcpshard-fake-kcp", "--help")
        assert fake.returncode == 0, fake.stderr
    finally:
        c.remove()
