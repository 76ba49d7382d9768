"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their one-step cells, as PyTorch's.

Parameter names, layouts and gate orders are PyTorch's: ``weight_ih_l{k}``
(G·H, in), ``weight_hh_l{k}`` (G·H, H), ``bias_ih_l{k}``, ``bias_hh_l{k}``
(G·H), with a ``_reverse`` suffix for the backward direction; gates stacked
as (i, f, g, o) for LSTM and (r, z, n) for GRU. Every weight starts as
U(-1/√H, 1/√H). The input projection of a whole sequence is one matmul; the
recurrence is a loop over time steps of ordinary ops, so gradients come from
the primitives.
"""

from __future__ import annotations

import math
from typing import Any

from ember.errors import ShapeError
from ember.nn import init
from ember.nn.functional.dropout import dropout as dropout_fn
from ember.nn.functional.linear import linear
from ember.nn.module import Module
from ember.nn.param import Param
from ember.ops._core import resolve_device
from ember.ops.creation import zeros
from ember.ops.shape import cat, stack
from ember.tensor import Tensor

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ----- one time step ----------------------------------------------------------------------


def rnn_tanh_cell(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """h' = tanh(gi + h W_hhᵀ + b_hh), with gi = x W_ihᵀ + b_ih precomputed."""
    return (gi + linear(h, w_hh, b_hh)).tanh()


def rnn_relu_cell(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """h' = relu(gi + h W_hhᵀ + b_hh)."""
    return (gi + linear(h, w_hh, b_hh)).relu()


def lstm_cell(gi: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor,
              b_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """One LSTM step; gates (i, f, g, o) of gi + h W_hhᵀ + b_hh.

    c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g);  h' = σ(o) ⊙ tanh(c').
    """
    h, c = state
    i, f, g, o = (gi + linear(h, w_hh, b_hh)).chunk(4, dim=-1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def gru_cell(gi: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """One GRU step; gates (r, z, n), PyTorch's variant (r multiplies W_hn h + b_hn).

    r = σ(gi_r + gh_r), z = σ(gi_z + gh_z), n = tanh(gi_n + r ⊙ gh_n),
    h' = (1 - z) ⊙ n + z ⊙ h, with gh = h W_hhᵀ + b_hh.
    """
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = linear(h, w_hh, b_hh).chunk(3, dim=-1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return n + z * (h - n)


_CELLS = {"RNN_TANH": rnn_tanh_cell, "RNN_RELU": rnn_relu_cell, "LSTM": lstm_cell,
          "GRU": gru_cell}


# ----- multi-layer sequence modules -------------------------------------------------------


class _RNNBase(Module):
    """PyTorch's ``RNNBase``: the parameters of every layer and direction, and the loops."""

    mode = ""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, *, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(f"{name}: hidden_size and num_layers must be positive, got "
                             f"{hidden_size} and {num_layers}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout should be a number in [0, 1], got {dropout}")
        if proj_size:
            raise ValueError(f"{name}: proj_size is not supported (got {proj_size}); use "
                             f"proj_size=0")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = 0
        device = resolve_device(device)
        gates = _GATES[self.mode] * hidden_size
        directions = 2 if bidirectional else 1
        bound = 1.0 / math.sqrt(hidden_size)
        self._names: list[tuple[str, str, str | None, str | None]] = []
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [(f"weight_ih{suffix}", (gates, layer_in)),
                          (f"weight_hh{suffix}", (gates, hidden_size))]
                if bias:
                    shapes += [(f"bias_ih{suffix}", (gates,)), (f"bias_hh{suffix}", (gates,))]
                for param_name, shape in shapes:
                    p = Param(zeros(shape, dtype=dtype, device=device))
                    setattr(self, param_name, init.uniform(p, -bound, bound))
                self._names.append((f"weight_ih{suffix}", f"weight_hh{suffix}",
                                    f"bias_ih{suffix}" if bias else None,
                                    f"bias_hh{suffix}" if bias else None))

    def _weights(self, index: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        return tuple(None if n is None else getattr(self, n).value for n in self._names[index])

    def _initial_state(self, x: Tensor, hx: Any, batch: int, batched: bool) -> list:
        """Per layer·direction initial states (h, or (h, c) for LSTM), each (N, H)."""
        name = type(self).__name__
        count = self.num_layers * (2 if self.bidirectional else 1)
        expected = (count, batch, self.hidden_size) if batched else (count, self.hidden_size)
        lstm = self.mode == "LSTM"
        if hx is None:
            h = zeros((count, batch, self.hidden_size), dtype=x.dtype, device=x.device.inner)
            parts = (h, h) if lstm else (h,)
        else:
            if lstm:
                if not isinstance(hx, tuple | list) or len(hx) != 2:
                    raise TypeError(f"{name}: hx must be a tuple (h_0, c_0), got "
                                    f"{type(hx).__name__}")
                parts = tuple(hx)
            else:
                parts = (hx,)
            for label, t in zip(("h_0", "c_0"), parts):
                if not isinstance(t, Tensor):
                    raise TypeError(f"{name}: {label} must be a tensor, got {type(t).__name__}")
                if tuple(t.shape) != expected:
                    raise ShapeError(f"{name}: expected {label} of shape {expected}, got "
                                     f"{t.shape}")
            if not batched:
                parts = tuple(t.unsqueeze(1) for t in parts)
        split = [t.split(1, dim=0) if count > 1 else (t,) for t in parts]
        states = [tuple(s[k].reshape(batch, self.hidden_size) for s in split)
                  for k in range(count)]
        return [s if lstm else s[0] for s in states]

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:  # noqa: A002
        """Run the sequence through every layer.

        Args:
            input: (L, N, H_in), (N, L, H_in) with ``batch_first``, or unbatched (L, H_in).
            hx: initial hidden state (D·num_layers, N, H) — for LSTM a tuple
                ``(h_0, c_0)`` — or None for zeros (D = 2 if bidirectional).

        Returns:
            ``(output, h_n)`` (LSTM: ``(output, (h_n, c_n))``); output (L, N, D·H)
            (or batch first, or unbatched), h_n (D·num_layers, N, H).
        """
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: input must be a tensor, got {type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ShapeError(f"{name}: expected a 2-D (unbatched) or 3-D input, got shape "
                             f"{input.shape}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input has {input.shape[-1]} features, expected "
                             f"input_size={self.input_size} (shape {input.shape})")
        batched = input.ndim == 3
        x = input
        if not batched:
            x = x.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        length, batch = x.shape[0], x.shape[1]
        if length == 0:
            raise ShapeError(f"{name}: the input sequence is empty (shape {input.shape})")
        states = self._initial_state(x, hx, batch, batched)
        cell = _CELLS[self.mode]
        directions = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                x = dropout_fn(x, self.dropout, training=True)
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                w_ih, w_hh, b_ih, b_hh = self._weights(index)
                steps = linear(x, w_ih, b_ih).split(1, dim=0) if length > 1 else (
                    linear(x, w_ih, b_ih),)
                state = states[index]
                hs = [None] * length
                order = range(length - 1, -1, -1) if direction else range(length)
                for t in order:
                    gi = steps[t].reshape(batch, steps[t].shape[-1])
                    state = cell(gi, state, w_hh, b_hh)
                    hs[t] = state[0] if self.mode == "LSTM" else state
                outputs.append(stack(hs, dim=0))
                finals.append(state)
            x = outputs[0] if directions == 1 else cat(outputs, dim=-1)
        output = x
        if self.mode == "LSTM":
            h_n = stack([s[0] for s in finals], dim=0)
            c_n = stack([s[1] for s in finals], dim=0)
        else:
            h_n, c_n = stack(finals, dim=0), None
        if not batched:
            output = output.reshape(length, output.shape[-1])
            h_n = h_n.reshape(h_n.shape[0], self.hidden_size)
            c_n = None if c_n is None else c_n.reshape(c_n.shape[0], self.hidden_size)
        elif self.batch_first:
            output = output.transpose(0, 1)
        return (output, (h_n, c_n)) if self.mode == "LSTM" else (output, h_n)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


class RNN(_RNNBase):
    """An Elman RNN, as PyTorch's: h_t = tanh(x_t W_ihᵀ + b_ih + h_{t-1} W_hhᵀ + b_hh).

    Args:
        input_size, hidden_size: feature sizes of the input and the hidden state.
        num_layers: stacked layers. Default 1.
        nonlinearity: "tanh" or "relu". Default "tanh".
        bias: learn ``bias_ih`` and ``bias_hh``. Default True.
        batch_first: input and output are (N, L, ·). Default False, as PyTorch.
        dropout: dropout on each layer's output except the last, in training. Default 0.
        bidirectional: also run backwards and concatenate. Default False.
        device, dtype: where and in what type the parameters live.

    Shape: input (L, N, H_in), h_0 (D·num_layers, N, H) → output (L, N, D·H), h_n like h_0.

    Example:
        >>> rnn = nn.RNN(10, 20, num_layers=2)
        >>> out, h = rnn(em.randn(5, 3, 10))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, *, device: Any = None,
                 dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}; use 'tanh' or 'relu'")
        Module.__init__(self)  # so the mode can be set before the parameters are made
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device=device, dtype=dtype)


class LSTM(_RNNBase):
    """A long short-term memory RNN (Hochreiter & Schmidhuber, 1997), as PyTorch's.

    i = σ(W_ii x + b_ii + W_hi h + b_hi),  f = σ(W_if x + b_if + W_hf h + b_hf),
    g = tanh(W_ig x + b_ig + W_hg h + b_hg),  o = σ(W_io x + b_io + W_ho h + b_ho),
    c' = f ⊙ c + i ⊙ g,  h' = o ⊙ tanh(c'). Weights stack the gates as (i, f, g, o).

    Args:
        input_size, hidden_size: feature sizes of the input and the hidden state.
        num_layers: stacked layers. Default 1.
        bias: learn ``bias_ih`` and ``bias_hh``. Default True.
        batch_first: input and output are (N, L, ·). Default False, as PyTorch.
        dropout: dropout on each layer's output except the last, in training. Default 0.
        bidirectional: also run backwards and concatenate. Default False.
        proj_size: must be 0 (projections are not supported; any other value
            raises ValueError).
        device, dtype: where and in what type the parameters live.

    Shape: input (L, N, H_in), (h_0, c_0) each (D·num_layers, N, H) →
    output (L, N, D·H), (h_n, c_n) like (h_0, c_0).

    Example:
        >>> lstm = nn.LSTM(10, 20, num_layers=2, batch_first=True)
        >>> out, (h, c) = lstm(em.randn(3, 5, 10))
        >>> out.shape, h.shape
        ((3, 5, 20), (2, 3, 20))
    """

    mode = "LSTM"


class GRU(_RNNBase):
    """A gated recurrent unit RNN (Cho et al., 2014), as PyTorch's.

    r = σ(W_ir x + b_ir + W_hr h + b_hr),  z = σ(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 - z) ⊙ n + z ⊙ h.
    Weights stack the gates as (r, z, n).

    Args:
        input_size, hidden_size: feature sizes of the input and the hidden state.
        num_layers: stacked layers. Default 1.
        bias: learn ``bias_ih`` and ``bias_hh``. Default True.
        batch_first: input and output are (N, L, ·). Default False, as PyTorch.
        dropout: dropout on each layer's output except the last, in training. Default 0.
        bidirectional: also run backwards and concatenate. Default False.
        device, dtype: where and in what type the parameters live.

    Shape: input (L, N, H_in), h_0 (D·num_layers, N, H) → output (L, N, D·H), h_n like h_0.

    Example:
        >>> gru = nn.GRU(10, 20)
        >>> out, h = gru(em.randn(5, 3, 10))
    """

    mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, *, device: Any = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device=device, dtype=dtype)


# ----- cells ------------------------------------------------------------------------------


class _CellBase(Module):
    """PyTorch's ``RNNCellBase``: ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``."""

    mode = ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        device = resolve_device(device)
        gates = _GATES[self.mode] * hidden_size
        bound = 1.0 / math.sqrt(hidden_size)

        def param(*shape: int) -> Param:
            return init.uniform(Param(zeros(shape, dtype=dtype, device=device)), -bound, bound)

        self.weight_ih = param(gates, input_size)
        self.weight_hh = param(gates, hidden_size)
        self.bias_ih = param(gates) if bias else None
        self.bias_hh = param(gates) if bias else None

    def _step(self, input: Tensor, hx: Any) -> Any:  # noqa: A002
        name = type(self).__name__
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: expected input (N, {self.input_size}) or "
                             f"({self.input_size},), got {input.shape}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        lstm = self.mode == "LSTM"
        if hx is None:
            h = zeros((x.shape[0], self.hidden_size), dtype=x.dtype, device=x.device.inner)
            state = (h, h) if lstm else h
        else:
            parts = tuple(hx) if lstm else (hx,)
            expected = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
            for t in parts:
                if tuple(t.shape) != expected:
                    raise ShapeError(f"{name}: expected a hidden state of shape {expected}, "
                                     f"got {t.shape}")
            if not batched:
                parts = tuple(t.unsqueeze(0) for t in parts)
            state = parts if lstm else parts[0]
        bias_ih = None if self.bias_ih is None else self.bias_ih.value
        bias_hh = None if self.bias_hh is None else self.bias_hh.value
        gi = linear(x, self.weight_ih.value, bias_ih)
        out = _CELLS[self.mode](gi, state, self.weight_hh.value, bias_hh)
        if batched:
            return out
        return tuple(t.reshape(self.hidden_size) for t in out) if lstm else out.reshape(
            self.hidden_size)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_CellBase):
    """One Elman RNN step: h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh) (or relu).

    Shape: input (N, H_in), hx (N, H) (or unbatched) → h' (N, H).

    Example:
        >>> nn.RNNCell(10, 20)(em.randn(3, 10)).shape   # hx defaults to zeros
        (3, 20)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", *, device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: unknown nonlinearity {nonlinearity!r}")
        Module.__init__(self)
        self.mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        return self._step(input, hx)


class LSTMCell(_CellBase):
    """One LSTM step (gates i, f, g, o), as PyTorch's ``LSTMCell``.

    Shape: input (N, H_in), hx (h, c) each (N, H) (or unbatched) → (h', c').

    Example:
        >>> cell = nn.LSTMCell(10, 20)
        >>> h, c = cell(em.randn(3, 10))
    """

    mode = "LSTM"

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor]:  # noqa: A002
        return self._step(input, hx)


class GRUCell(_CellBase):
    """One GRU step (gates r, z, n), as PyTorch's ``GRUCell``.

    Shape: input (N, H_in), hx (N, H) (or unbatched) → h' (N, H).

    Example:
        >>> cell = nn.GRUCell(10, 20)
        >>> h = em.zeros((3, 20))
        >>> for x in em.randn(6, 3, 10):   # six steps of a batch of 3
        ...     h = cell(x, h)
        >>> h.shape
        (3, 20)
    """

    mode = "GRU"

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        return self._step(input, hx)
