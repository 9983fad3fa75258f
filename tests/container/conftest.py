"""The image, built once per test run with deploy/image.sh (cached base and wheels). Without
Podman the container tests skip, except in CI (CI=true), where `make deps-system` installs it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.container import podman


@pytest.fixture(scope="session")
def image(request: pytest.FixtureRequest) -> Iterator[str]:
    why = podman.available()
    if why is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the container tests need Podman in CI: {why}")
        pytest.skip(why)
    # under xdist, the first process of the run to need the image builds it for both
    run = getattr(request.config, "workerinput", {}).get("testrunuid")
    built = podman.build_image(run)
    tag = podman.IMAGE if built is None else built[0]
    size = int(podman.run(["image", "inspect", "--format", "{{.Size}}", tag]).stdout.strip())
    how = "built by another process of this run" if built is None else f"built in {built[1]:.0f}s"
    print(f"\nimage {tag}: {size / 1e6:.0f} MB, {how}")
    yield tag
    podman.remove_labelled()
