"""Autodiff: the gradient path. Tracked ops record nodes; ``backward`` walks them in reverse."""

# Loading the graph installs its recorder into ops' recording hook (ember.ops.recording).
from ember.autodiff import graph  # noqa: F401
