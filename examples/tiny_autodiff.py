"""Reverse-mode automatic differentiation from scratch, in plain Python and NumPy.

The companion of ``docs/tutorials/autodiff-from-scratch.md``: a value type
(``Var``: an array and the node that made it), a tape (the list of nodes in the
order the forward pass created them), ``backward`` (walk the tape in reverse,
each node turning its output's gradient into its inputs'), a handful of ops, and
an MLP trained on scikit-learn's digits with plain SGD. At the end the same MLP
and batch go through ember, and the two sets of gradients are compared.

Run: ``python examples/tiny_autodiff.py`` (``--epochs N``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# ----- the value type and the tape ------------------------------------------------------


@dataclass(eq=False)
class Node:
    """One recorded op: which values it read, and how to push a gradient back to them.

    ``backward(grad)`` returns one gradient per parent (``None`` where no gradient flows);
    it closes over whatever the forward kept for it (its inputs, its output, a mask).
    """

    parents: tuple[Var, ...]
    backward: Callable[[np.ndarray], tuple[np.ndarray | None, ...]]
    name: str


@dataclass(eq=False)
class Var:
    """An array, and the node that computed it (``None`` for a constant or a leaf)."""

    data: np.ndarray
    node: Node | None = None
    requires_grad: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def __add__(self, other: Var) -> Var:
        return add(self, other)

    def __mul__(self, other: Var) -> Var:
        return mul(self, other)

    def __matmul__(self, other: Var) -> Var:
        return matmul(self, other)


@dataclass
class Tape:
    """The nodes recorded since the tape was opened, in creation order."""

    nodes: list[tuple[Var, Node]] = field(default_factory=list)


TAPE = Tape()


def tracked(*inputs: Var) -> bool:
    return any(v.requires_grad or v.node is not None for v in inputs)


def record(name: str, out: np.ndarray, parents: tuple[Var, ...],
           backward: Callable[[np.ndarray], tuple]) -> Var:
    """Wrap ``out`` in a ``Var``; if any parent is tracked, append its node to the tape."""
    if not tracked(*parents):
        return Var(out)
    result = Var(out)
    result.node = Node(parents, backward, name)
    TAPE.nodes.append((result, result.node))
    return result


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the dims broadcasting added or stretched, back to ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


def backward(root: Var) -> dict[int, np.ndarray]:
    """Gradients of the scalar ``root`` with respect to every tracked value it depends on.

    Walks the tape from its end: a node is created after its inputs, so the reverse of
    creation order is a reverse topological order, and by the time a node runs, every
    consumer of its output has added its share to that output's gradient. Gradients are
    accumulated by the value's id (a value used twice gets the sum; ids stay unique as the
    tape holds every value until the walk ends). Returns
    ``{id(var): gradient}``; the tape is cleared, as the graph is spent.
    """
    if root.data.size != 1:
        raise ValueError(f"backward: needs a scalar, got shape {root.shape}")
    grads: dict[int, np.ndarray] = {id(root): np.ones_like(root.data)}
    for out, node in reversed(TAPE.nodes):
        grad = grads.get(id(out))
        if grad is None:  # this node does not lead to the root
            continue
        for parent, g in zip(node.parents, node.backward(grad)):
            if g is None or not tracked(parent):
                continue
            g = unbroadcast(g, parent.shape)
            key = id(parent)
            grads[key] = grads[key] + g if key in grads else g
        if out is not root:  # an intermediate's gradient is spent once its node ran
            del grads[id(out)]
    TAPE.nodes.clear()
    return grads


# ----- the ops: each one's forward and backward side by side ------------------------------


def add(a: Var, b: Var) -> Var:
    return record("add", a.data + b.data, (a, b), lambda g: (g, g))


def mul(a: Var, b: Var) -> Var:
    return record("mul", a.data * b.data, (a, b), lambda g: (g * b.data, g * a.data))


def matmul(a: Var, b: Var) -> Var:
    """(n, k) @ (k, m): dL/da = g @ b.T, dL/db = a.T @ g."""
    return record("matmul", a.data @ b.data, (a, b), lambda g: (g @ b.data.T, a.data.T @ g))


def transpose(a: Var) -> Var:
    return record("transpose", a.data.T, (a,), lambda g: (g.T,))


def relu(a: Var) -> Var:
    mask = a.data > 0
    return record("relu", np.where(mask, a.data, 0.0), (a,), lambda g: (g * mask,))


def mean(a: Var) -> Var:
    n = a.data.size
    return record("mean", np.array(a.data.mean()), (a,),
                  lambda g: (np.broadcast_to(g / n, a.shape),))


def log_softmax(a: Var) -> Var:
    """Along the last dim; backward: g - softmax * sum(g)."""
    shifted = a.data - a.data.max(axis=-1, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    softmax = np.exp(out)
    return record("log_softmax", out, (a,),
                  lambda g: (g - softmax * g.sum(axis=-1, keepdims=True),))


def pick(a: Var, index: np.ndarray) -> Var:
    """``a[i, index[i]]`` for each row i (the gather cross-entropy needs)."""
    rows = np.arange(len(index))

    def back(g: np.ndarray) -> tuple[np.ndarray]:
        full = np.zeros_like(a.data)
        full[rows, index] = g
        return (full,)

    return record("pick", a.data[rows, index], (a,), back)


def neg(a: Var) -> Var:
    return record("neg", -a.data, (a,), lambda g: (-g,))


# Derived ops are compositions: their gradients come from the primitives'.
def linear(x: Var, weight: Var, bias: Var) -> Var:
    """x @ weight.T + bias, with PyTorch's (and ember's) weight layout (out, in)."""
    return x @ transpose(weight) + bias


def cross_entropy(logits: Var, target: np.ndarray) -> Var:
    return neg(mean(pick(log_softmax(logits), target)))


# ----- an MLP on digits -----------------------------------------------------------------

def init_mlp(sizes: tuple[int, ...] = (64, 64, 10), seed: int = 0) -> dict[str, np.ndarray]:
    """Weights named as ember's ``nn.Sequential(Linear, ReLU, Linear)`` names them, so the
    same dict loads into either (PyTorch's uniform(±1/sqrt(fan_in)) init)."""
    rng = np.random.default_rng(seed)
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        bound = 1.0 / np.sqrt(fan_in)
        params[f"{2 * i}.weight"] = rng.uniform(-bound, bound, (fan_out, fan_in))
        params[f"{2 * i}.bias"] = rng.uniform(-bound, bound, fan_out)
    return {k: v.astype(np.float32) for k, v in params.items()}


def mlp_loss(params: dict[str, Var], x: np.ndarray, y: np.ndarray) -> tuple[Var, Var]:
    """(loss, logits) of the MLP on a batch."""
    h = Var(x)
    names = sorted({k.split(".")[0] for k in params}, key=int)
    for i, name in enumerate(names):
        h = linear(h, params[f"{name}.weight"], params[f"{name}.bias"])
        if i < len(names) - 1:
            h = relu(h)
    return cross_entropy(h, y), h


def gradients(weights: dict[str, np.ndarray], x: np.ndarray,
              y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """The loss and ``{name: dloss/dweight}`` of the MLP on one batch."""
    params = {k: Var(v, requires_grad=True) for k, v in weights.items()}
    loss, _ = mlp_loss(params, x, y)
    grads = backward(loss)
    return float(loss.data), {k: grads[id(p)] for k, p in params.items()}


def train(epochs: int = 10, batch_size: int = 64, lr: float = 0.2, seed: int = 0,
          log: bool = True) -> tuple[dict[str, np.ndarray], float]:
    """Plain SGD on digits; returns the weights and the test accuracy."""
    from train_digits import load_data

    (x_train, y_train), (x_test, y_test) = load_data(seed)
    weights = init_mlp(seed=seed)
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            loss, grads = gradients(weights, x_train[batch], y_train[batch])
            weights = {k: w - lr * grads[k] for k, w in weights.items()}
            losses.append(loss)
        _, logits = mlp_loss({k: Var(v) for k, v in weights.items()}, x_test, y_test)
        accuracy = float((logits.data.argmax(axis=1) == y_test).mean())
        if log:
            print(f"epoch {epoch + 1:2d}: train loss {np.mean(losses):.4f}, "
                  f"test accuracy {accuracy:.2%}")
    return weights, accuracy


# ----- the same gradients from ember ------------------------------------------------------


def ember_gradients(weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray,
                    checkpointing: str | None = None) -> tuple[float, dict[str, np.ndarray]]:
    """The same loss and gradients, computed by ember's autodiff on the CPU
    (``checkpointing="balanced"``: recomputing memory-bound ops' outputs in backward)."""
    import ember as em
    from ember import nn

    device = em.cpu().autodiff(checkpointing=checkpointing)
    names = sorted({k.split(".")[0] for k in weights}, key=int)
    layers: list[nn.Module] = []
    for name in names:
        fan_out, fan_in = weights[f"{name}.weight"].shape
        layers += [nn.Linear(fan_in, fan_out, device=device), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])  # the names line up: Linear, ReLU, Linear, ...
    model.load_state_dict(weights)
    loss = nn.F.cross_entropy(model(em.tensor(x, device=device)), em.tensor(y, device=device))
    grads = loss.backward()
    return loss.item(), {name: p.value.grad(grads).numpy()
                         for name, p in model.named_parameters()}


def main(epochs: int = 10) -> float:
    weights, accuracy = train(epochs)
    from train_digits import load_data

    (x, y), _ = load_data()
    ours_loss, ours = gradients(weights, x[:32], y[:32])
    theirs_loss, theirs = ember_gradients(weights, x[:32], y[:32])
    worst = max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours)
    print(f"one batch after training: loss {ours_loss:.6f} here, {theirs_loss:.6f} in ember; "
          f"largest gradient difference {worst:.2e}")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    main(parser.parse_args().epochs)
