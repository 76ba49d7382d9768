"""Layers: modules that hold parameters and delegate to ``nn.functional``."""
