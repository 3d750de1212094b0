"""Shared fixtures: the build folder (BRAID_BUILD_DIR, set by ctest) and its example models."""
import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def build_dir():
    path = os.environ.get("BRAID_BUILD_DIR")
    if not path:
        pytest.skip("BRAID_BUILD_DIR is not set (ctest sets it)")
    return pathlib.Path(path)


@pytest.fixture(scope="session")
def models(build_dir):
    return build_dir / "examples" / "models"
