"""Fixtures of the dataset tests: no test reads the real cache or the network."""

from __future__ import annotations

from pathlib import Path

import pytest
import sklearn.datasets

# tests/datasets/conftest.py -> repository root is parents[2]; ../shared sits beside it.
SHARED_DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


class NetworkDisabledError(OSError):
    """Raised by the stand-in of fetch_openml in tests."""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """Empty cache folder, no MBKKM_DATA, and fetch_openml that fails as if offline."""
    monkeypatch.delenv("MBKKM_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))

    def offline(*args, **kwargs):
        raise NetworkDisabledError("network disabled in tests")

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", offline)


@pytest.fixture
def shared_datasets() -> Path:
    """The shared folder of the paper's datasets (skips when it is absent)."""
    names = ("pendigits", "letter", "mnist")
    missing = [n for n in names if not (SHARED_DATASETS / f"{n}.npz").is_file()]
    if missing:
        pytest.skip(
            f"shared dataset folder {SHARED_DATASETS} is absent or lacks "
            f"{', '.join(m + '.npz' for m in missing)}"
        )
    return SHARED_DATASETS
