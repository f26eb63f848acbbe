"""Shared test helpers: where ../shared lives, and a clear failure if it is missing."""
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_ROOT = pathlib.Path(os.environ.get("ALBERT_TF_SHARED", REPO_ROOT.parent / "shared"))


def shared_file(*parts: str) -> pathlib.Path:
    """Path of a file under ../shared; fails the test (not skips) if it is absent."""
    path = SHARED_ROOT.joinpath(*parts)
    if not path.exists():
        pytest.fail(
            f"test data not found: expected {path} (the ../shared folder beside the "
            f"repository, or set ALBERT_TF_SHARED to its location)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def shared():
    return shared_file
