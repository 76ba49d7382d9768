"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, and ``Identity``.

``ModuleList`` and ``ModuleDict`` keep their entries among the module's children
only (not as attributes); parameters are named ``<index>.weight`` / ``<key>.weight``,
as in PyTorch, which also refuses dict keys that name an attribute (``"keys"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ember.nn.module import Module


def _checked(owner: str, label: Any, module: Any) -> Module:
    if not isinstance(module, Module):
        raise TypeError(f"{owner}: item {label!r} is {type(module).__name__}, not a Module")
    return module


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


class Identity(Module):
    """Returns its input; any constructor arguments are ignored, as PyTorch's.

    Example:
        >>> head = nn.Identity()         # e.g. to drop a classifier from a backbone
        >>> head(em.ones(2, 3)).shape
        (2, 3)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class ModuleList(Module):
    """A list of sub-modules, registered: their parameters are named ``0.weight``, ...

    Indexing, slicing (a new ``ModuleList``), ``len``, iteration, ``append``, ``extend``,
    ``insert``, ``pop``, item assignment and deletion behave as on a list; entries after
    a deleted or inserted one are renumbered, as PyTorch renumbers them.

    Example:
        >>> class Stack(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        ...     def forward(self, x):
        ...         for layer in self.layers:
        ...             x = layer(x).relu()
        ...         return x
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _entries(self) -> list[Module]:
        return list(self._children.values())

    def _renumber(self, entries: list[Module]) -> None:
        self._children.clear()
        for i, m in enumerate(entries):
            self._children[str(i)] = m

    def _index(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"ModuleList: indices must be ints or slices, not "
                            f"{type(index).__name__}")
        n = len(self._children)
        if not -n <= index < n:
            raise IndexError(f"ModuleList: index {index} is out of range for {n} modules")
        return index + n if index < 0 else index

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._entries())

    def __getitem__(self, index: int | slice) -> Module | ModuleList:
        if isinstance(index, slice):
            return ModuleList(self._entries()[index])
        return self._children[str(self._index(index))]

    def __setitem__(self, index: int, module: Module) -> None:
        self._children[str(self._index(index))] = _checked("ModuleList", index, module)

    def __delitem__(self, index: int | slice) -> None:
        entries = self._entries()
        del entries[index if isinstance(index, slice) else self._index(index)]
        self._renumber(entries)

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self._entries(), *other])

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end (registered as the next index); returns the list."""
        self._children[str(len(self._children))] = _checked("ModuleList", len(self), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Append each of ``modules`` in order; returns the list."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index``; later modules shift up one name."""
        entries = self._entries()
        entries.insert(index, _checked("ModuleList", index, module))
        self._renumber(entries)

    def pop(self, index: int = -1) -> Module:
        """Remove the module at ``index`` and return it; later modules shift down one name."""
        entries = self._entries()
        module = entries.pop(self._index(index))
        self._renumber(entries)
        return module


class ModuleDict(Module):
    """An ordered dict of named sub-modules, registered: parameters are named
    ``<key>.weight``, ... Keys are strings without dots.

    Example:
        >>> heads = nn.ModuleDict({"cls": nn.Linear(8, 3), "box": nn.Linear(8, 4)})
        >>> sorted(heads.keys())
        ['box', 'cls']
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None
                 = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._children[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be strings, got {type(key).__name__}")
        if not key or "." in key:
            raise KeyError(f"ModuleDict: key {key!r} must be non-empty and contain no '.'")
        if key not in self._children and hasattr(self, key):  # PyTorch refuses these too
            raise KeyError(f"ModuleDict: key {key!r} is already an attribute of the dict "
                           f"(a method or a setting); choose another name")
        self._children[key] = _checked("ModuleDict", key, module)

    def __delitem__(self, key: str) -> None:
        del self._children[key]

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._children))

    def __contains__(self, key: object) -> bool:
        return key in self._children

    def keys(self) -> list[str]:
        """The modules' names, in insertion order."""
        return list(self._children)

    def values(self) -> list[Module]:
        """The modules, in insertion order."""
        return list(self._children.values())

    def items(self) -> list[tuple[str, Module]]:
        """``(name, module)`` pairs, in insertion order."""
        return list(self._children.items())

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace modules from a mapping or ``(name, module)`` pairs, in order."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for pair in pairs:
            key, module = pair
            self[key] = module

    def pop(self, key: str) -> Module:
        """Remove the module named ``key`` and return it (``KeyError`` when absent)."""
        return self._children.pop(key)

    def clear(self) -> None:
        """Remove every module (their parameters leave the tree with them)."""
        self._children.clear()
