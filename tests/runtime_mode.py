"""Markers for tests of the lazy runtime, which ``EMBER_EAGER=1`` (every op computed at its
call, on the caller's thread) has no part of: queues, ops run at once or later, failures
kept until a read."""

from __future__ import annotations

import pytest

from ember.ops import _core

# With EMBER_EAGER=1 a failing op raises at its own line instead of at the read, and no op
# waits in a queue.
lazy_only = pytest.mark.skipif(_core.EAGER, reason="EMBER_EAGER=1 computes every op at its "
                                                   "call: nothing queues, a failure raises there")
