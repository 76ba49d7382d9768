"""``Module.save`` / ``Module.load``: a module's parameters, buffers and their ids in an ember file.

The file is an ordinary ember file (see ``msgpack_file``; ``em.load`` reads it
too) whose root is::

    {"format": "ember.module", "version": 1,
     "state": {dotted name: NumPy array},      # Module.state_dict()
     "ids":   {dotted name: Param.id}}

Loading checks the file's structure first (RecordError), then hands ``state``
to ``Module.load_state_dict`` (strict: missing / unexpected keys, shape and
dtype mismatches raise there, naming the key, and nothing is changed), and only
then restores each parameter's ``id`` — so optimizer state keyed by id still
matches after a reload.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import RecordError
from ember.record import msgpack_file
from ember.record_io import atomic_write_bytes

FORMAT = "ember.module"
VERSION = 1


def save_module(module: Any, path: str | os.PathLike) -> None:
    """Write ``module``'s parameters and buffers, with their ids, to ``path`` (atomic)."""
    ids = {name: slot.id for name, slot in module.named_slots()}
    root = {"format": FORMAT, "version": VERSION, "state": module.state_dict(), "ids": ids}
    atomic_write_bytes(Path(path), msgpack_file.encode(root))


def load_module(module: Any, path: str | os.PathLike) -> Any:
    """Load what ``save_module`` wrote into ``module`` (in place, strict); returns it.

    Raises:
        RecordError: not a module file, or a corrupt / truncated / hostile one.
        KeyError, ShapeError, DTypeError: the file does not fit the module
            (from ``Module.load_state_dict``, naming the key).
    """
    root = msgpack_file.decode_root(msgpack_file.read_root(path), tensors_as_numpy=True,
                                    device=None)
    where = f"module file {os.fspath(path)!r}"
    if not isinstance(root, dict) or root.get("format") != FORMAT:
        raise RecordError(f"{where}: not a module file (no format {FORMAT!r}); help: files "
                          f"from em.save load with em.load")
    if type(root.get("version")) is not int or root["version"] != VERSION:
        raise RecordError(f"{where}: module file version {root.get('version')!r} is not "
                          f"supported (this ember reads version {VERSION})")
    state, ids = root.get("state"), root.get("ids")
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in state.items()):
        raise RecordError(f"{where}: 'state' must map names to arrays")
    if not isinstance(ids, dict) or ids.keys() != state.keys() or not all(
            isinstance(v, str) and v for v in ids.values()):
        raise RecordError(f"{where}: 'ids' must map every name of 'state' to a non-empty str")
    module.load_state_dict(state, strict=True)
    for name, slot in module.named_slots():
        slot.id = ids[name]
    return module
