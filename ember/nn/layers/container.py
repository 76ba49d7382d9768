"""``Sequential``: modules applied in order."""

from __future__ import annotations

from typing import Any

from ember.nn.module import Module


class Sequential(Module):
    """Applies its modules in order; parameters are named ``0.weight``, ``1.bias``, ...

    Example:
        >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    """

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: item {i} is {type(m).__name__}, not a Module")
            setattr(self, str(i), m)

    def __len__(self) -> int:
        return len(self._children)

    def __getitem__(self, index: int) -> Module:
        return list(self._children.values())[index]

    def __iter__(self):
        return iter(self._children.values())

    def forward(self, x: Any) -> Any:
        for m in self._children.values():
            x = m(x)
        return x
