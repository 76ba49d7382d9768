"""NumPy kernels of the shape ops.

Reshape, permute, expand and split return views of their input where NumPy
can: the pool never reuses a buffer a view still holds, and no kernel writes
into its inputs, so sharing is safe.
"""

from __future__ import annotations

from ember.kernels.numpy.table import NP, kernel, namespace


@kernel("reshape")
def _reshape(msg, pool, x):
    return x.reshape(msg.shape)


@kernel("permute")
def _permute(msg, pool, x):
    (order,) = msg.attrs
    return x.transpose(order)


@kernel("expand")
def _expand(msg, pool, x):
    return namespace(x).broadcast_to(x, msg.shape)


@kernel("repeat")
def _repeat(msg, pool, x):
    # Tiling is a broadcast copy: view the output as (reps[0], size[0], reps[1], size[1], ...)
    # and broadcast x, seen as (1, size[0], 1, size[1], ...), into it.
    (reps,) = msg.attrs
    padded = (1,) * (len(reps) - x.ndim) + x.shape
    out = pool.empty(msg.shape, x.dtype)
    tiles = out.reshape(tuple(n for pair in zip(reps, padded) for n in pair))
    namespace(x).copyto(tiles, x.reshape(tuple(n for s in padded for n in (1, s))))
    return out


@kernel("split")
def _split(msg, pool, x):
    dim, offsets = msg.attrs
    return tuple(namespace(x).split(x, offsets, axis=dim))


@kernel("cat")
def _cat(msg, pool, *arrays):
    dim, new_axis = msg.attrs
    out = pool.empty(msg.shape, NP[msg.dtype])
    xp = namespace(out)
    join = xp.stack if new_axis else xp.concatenate
    return join(arrays, axis=dim, out=out, casting="unsafe")


@kernel("bitcast")
def _bitcast(msg, pool, x):
    """The bytes of ``x`` read as the message's dtype (a copy: outputs own their buffer)."""
    out = namespace(x).ascontiguousarray(x).copy()
    return out.view(NP[msg.dtype]).reshape(msg.shape)
