"""Keys of the plugin's state in ``config.stash``: a leaf module that every
plugin module may import (none of them imports another for a key)."""

from __future__ import annotations

import pytest

from pytest_perfmodel.session import PerfmodelSession

#: The perfmodel session of this pytest session (set in ``pytest_configure``).
SESSION_KEY = pytest.StashKey[PerfmodelSession]()
