"""Autodiff: the gradient path. Tracked ops record nodes; ``backward`` walks them in reverse."""
