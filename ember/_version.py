"""ember's version, in a module of its own: kernels key their caches by it without
importing the package they sit under."""

__version__ = "0.1.0"
