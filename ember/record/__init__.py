"""Saving and loading: ember files (MessagePack via msgspec) and safetensors. Never pickle.

- ``em.save(obj, path)`` / ``em.load(path, device=None)``: tensors, NumPy
  arrays, scalars and nested dicts / lists / tuples of them — checkpoints,
  optimizer state (``msgpack_file`` documents the layout).
- ``em.save_safetensors(state_dict, path, metadata=None)`` /
  ``em.load_safetensors(path, device=None, as_numpy=False)``: the format the
  Hugging Face ecosystem shares (``safetensors_file``).
- ``Module.save`` / ``Module.load``: parameters, buffers and their ids
  (``module_file``).

Loading only ever decodes data: a corrupt, truncated or hostile file raises
``em.RecordError`` saying what is wrong, before anything of the size it claims
is allocated. Every write goes to a temporary file in the target's folder,
is fsynced and renamed into place: a reader sees the old file or the new one.

PyTorch weights: ember's layers name their parameters as PyTorch's do and
store them in the same layouts, so the key mapping is the identity —
``linear.weight`` (out, in), ``linear.bias``, Sequential's ``0.weight`` ... —
and no conversion step exists::

    # torch: safetensors.torch.save_file(torch_model.state_dict(), "m.safetensors")
    model.load_state_dict(em.load_safetensors("m.safetensors", as_numpy=True))
"""

from ember.record.msgpack_file import load, save
from ember.record.safetensors_file import (
    load_safetensors,
    load_safetensors_metadata,
    save_safetensors,
)

__all__ = ["load", "load_safetensors", "load_safetensors_metadata", "save", "save_safetensors"]
