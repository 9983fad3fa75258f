"""The image, built once per test session with deploy/image.sh (cached base and wheels). Without
Podman the container tests skip, except in CI (CI=true), where `make deps-system` installs it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.container import podman


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    why = podman.available()
    if why is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the container tests need Podman in CI: {why}")
        pytest.skip(why)
    tag, seconds = podman.build_image()
    size = int(podman.run(["image", "inspect", "--format", "{{.Size}}", tag]).stdout.strip())
    print(f"\nimage {tag}: {size / 1e6:.0f} MB, built in {seconds:.0f}s")
    yield tag
    podman.remove_labelled()
