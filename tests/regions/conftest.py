"""Each region test starts with the region folders it names itself: folders a test adds (store.add_folder) end with it."""

import pytest

from autokernel.kernel_types.regions import store


@pytest.fixture(autouse=True)
def own_region_folders(monkeypatch):
    monkeypatch.setattr(store, "_added", [])
