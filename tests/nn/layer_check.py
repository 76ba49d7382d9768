"""Layer-vs-PyTorch checks shared by the layer test files.

``check_pair`` copies a torch layer's state dict into the ember layer, runs
both on the same inputs, and compares the outputs and — on an autodiff device
— the gradients of a random projection of every output with respect to every
float input and every parameter. ``check_fn`` does the same for functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember as em

def _torch():
    import torch as t

    return t


def flatten(out: Any) -> list:
    """Nested tuples / lists of tensors, flattened in order (None dropped)."""
    if out is None:
        return []
    if isinstance(out, tuple | list):
        return [t for o in out for t in flatten(o)]
    return [out]


def copy_state(torch_module: Any, ember_module: Any) -> None:
    ember_module.load_state_dict({k: v.detach().cpu().numpy()
                                  for k, v in torch_module.state_dict().items()})


def assert_same_layout(torch_module: Any, ember_module: Any) -> None:
    """Same state-dict keys in the same order, same shapes, same parameter names and counts."""
    t_state = torch_module.state_dict()
    e_state = ember_module.state_dict()
    assert list(e_state) == list(t_state)
    for k, v in t_state.items():
        assert e_state[k].shape == tuple(v.shape), k
    assert [n for n, _ in ember_module.named_parameters()] == \
        [n for n, _ in torch_module.named_parameters()]
    assert ember_module.num_params() == sum(p.numel() for p in torch_module.parameters())


def _to_torch(value: Any, grad: bool) -> Any:
    t = _torch()
    if isinstance(value, np.ndarray):
        out = t.tensor(value)
        return out.requires_grad_(True) if grad else out
    if isinstance(value, tuple):
        return tuple(_to_torch(v, grad) for v in value)
    return value


def _to_ember(value: Any, device: em.Device, grad: bool) -> Any:
    if isinstance(value, np.ndarray):
        out = em.tensor(value, device=device)
        return out.require_grad() if grad else out
    if isinstance(value, tuple):
        return tuple(_to_ember(v, device, grad) for v in value)
    return value


def _differentiable(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_differentiable(v) for v in value)
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def check_fn(torch_fn: Callable, ember_fn: Callable, inputs: Sequence[Any],
             wrt: Sequence[int] | None = None, torch_module: Any = None,
             ember_module: Any = None, rtol: float = 1e-7, atol: float = 1e-9,
             grad: bool = True, seed: int = 0,
             checkpointing: str | None = None) -> list[np.ndarray]:
    """Compare ``ember_fn(*inputs)`` with ``torch_fn(*inputs)``, values and gradients.

    Args:
        inputs: NumPy arrays (float ones are differentiated unless ``wrt`` says
            otherwise; int / bool ones are indices and masks), tuples of
            arrays (a recurrent state), or other Python values passed as they are.
        torch_module, ember_module: when given, their parameters' gradients are
            compared too, matched by name.
        grad: compare gradients (ember runs on an autodiff device); otherwise
            forward only, on the plain CPU device.
        checkpointing: the autodiff device's strategy (None or "balanced").

    Returns:
        the ember outputs, as NumPy arrays.
    """
    t = _torch()
    device = em.cpu().autodiff(checkpointing) if grad else em.cpu()
    if wrt is None:
        wrt = [i for i, v in enumerate(inputs) if _differentiable(v)]
    wrt = set(wrt) if grad else set()
    t_in = [_to_torch(v, i in wrt) for i, v in enumerate(inputs)]
    e_in = [_to_ember(v, device, i in wrt) for i, v in enumerate(inputs)]
    t_out = flatten(torch_fn(*t_in))
    e_out = flatten(ember_fn(*e_in))
    assert len(t_out) == len(e_out)
    results = []
    for k, (a, b) in enumerate(zip(t_out, e_out)):
        assert b.shape == tuple(a.shape), (k, b.shape, tuple(a.shape))
        assert b.dtype.name == str(a.dtype).removeprefix("torch."), (k, b.dtype, a.dtype)
        value = b.numpy()
        np.testing.assert_allclose(value, a.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"output {k}")
        results.append(value)
    if not grad:
        return results
    if torch_module is not None:
        torch_module.zero_grad(set_to_none=True)
    rng = np.random.default_rng(seed)
    seeds = [rng.standard_normal(tuple(a.shape)).astype(str(a.dtype).removeprefix("torch."))
             for a in t_out]
    t_loss = sum((a * t.tensor(s)).sum() for a, s in zip(t_out, seeds))
    t_loss.backward()
    e_loss = sum((b * em.tensor(s, device=device)).sum() for b, s in zip(e_out, seeds))
    grads = e_loss.backward()
    for i in sorted(wrt):
        for k, (a, b) in enumerate(zip(flatten(t_in[i]), flatten(e_in[i]))):
            got = b.grad(grads)
            want = a.grad
            if want is None:
                assert got is None or np.all(got.numpy() == 0), f"input {i}.{k}"
                continue
            assert got is not None, f"no gradient for input {i}.{k}"
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"gradient of input {i}.{k}")
    if torch_module is not None:
        t_params = dict(torch_module.named_parameters())
        for name, p in ember_module.named_parameters():
            want = t_params[name].grad
            got = p.grad(grads)
            if want is None:
                assert got is None or np.all(got.numpy() == 0), name
                continue
            assert got is not None, f"no gradient for parameter {name}"
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"gradient of parameter {name}")
    return results


def check_pair(torch_module: Any, make_ember: Callable[[em.Device, Any], Any],
               inputs: Sequence[Any], call: Callable | None = None, dtype: str = "float64",
               grad: bool = True, train: bool | None = None, checkpointing: str | None = None,
               **kw: Any) -> Any:
    """Build the ember twin of ``torch_module`` (in ``dtype``), copy its weights, compare.

    ``make_ember(device, dtype)`` builds the ember layer; ``call(module, *inputs)``
    runs either layer (default: ``module(*inputs)``). The torch module is
    converted to ``dtype``; ``train`` sets both modules' mode (default: torch's).
    Returns the ember module.
    """
    t = _torch()
    torch_module = torch_module.to(getattr(t, dtype))
    device = em.cpu().autodiff(checkpointing) if grad else em.cpu()
    ember_module = make_ember(device, dtype)
    copy_state(torch_module, ember_module)
    if train is None:
        train = torch_module.training
    torch_module.train(train)
    ember_module.train(train)
    call = call or (lambda m, *xs: m(*xs))
    inputs = [_cast(v, dtype) for v in inputs]
    check_fn(lambda *xs: call(torch_module, *xs), lambda *xs: call(ember_module, *xs), inputs,
             torch_module=torch_module, ember_module=ember_module, grad=grad,
             checkpointing=checkpointing, **kw)
    return ember_module


def _cast(value: Any, dtype: str) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return value.astype(dtype)
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype) for v in value)
    return value


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)
