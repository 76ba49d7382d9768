"""Autodiff: the gradient path. Tracked ops record nodes; ``backward`` walks them in reverse."""

# Loading the graph installs its recorder into ops' recording hook (ember.ops.recording);
# loading the methods gives Tensor require_grad, backward and grad.
from ember.autodiff import graph, methods  # noqa: F401
