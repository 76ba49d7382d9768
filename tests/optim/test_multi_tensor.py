"""Multi-tensor updates: one ``optimizer_update`` op per device and dtype computes what the
per-parameter ops compute (bit for bit where both do IEEE arithmetic), and what
torch.optim computes; the compiled C equals its NumPy fallback; the WebGPU translation
and the CUDA source agree with the program."""

from __future__ import annotations

import subprocess
import types
import zlib

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.kernels import multi_update
from ember.kernels.numpy import multi_update as cpu_update
from ember.kernels.numpy.table import KERNELS, NP
from ember.optim import actor as optimizer_actor
from ember.optim import adagrad, adam, rmsprop, sgd

torch = pytest.importorskip("torch")

DEVICE = em.cpu(0).autodiff()
# 0-d and empty parameters among ordinary ones; the big one spans both C threads.
SHAPES = [(4, 3), (3,), (), (0,), (2, 0, 3), (300, 257)]
STEPS = 6

CASES = {
    "SGD": {"lr": 0.05},
    "SGD-momentum": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.1},
    "SGD-dampening": {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "maximize": True},
    "SGD-nesterov": {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    "Adam": {"lr": 0.01},
    "Adam-decay": {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True},
    "Adam-maximize": {"lr": 0.01, "maximize": True, "betas": (0.8, 0.9)},
    "AdamW": {"lr": 0.01, "weight_decay": 0.1},
    "AdamW-amsgrad": {"lr": 0.01, "amsgrad": True, "maximize": True},
    "RMSprop": {"lr": 0.01, "weight_decay": 0.1},
    "RMSprop-centered": {"lr": 0.01, "centered": True, "momentum": 0.5, "maximize": True},
    "Adagrad": {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.1,
                "weight_decay": 0.1},
}


def _cls(case: str) -> str:
    return case.split("-")[0]


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _train(case: str, dtype: str, multi: bool, steps: int = STEPS, shapes=SHAPES,
           lr_changes: dict | None = None):
    """Parameters after ``steps`` updates from gradients ``c + p`` (loss Σ p·c + ½ Σ p²);
    the parameter at index 1 sits out odd steps (no gradient: skipped). Also torch's."""
    r = _rng(case + dtype)
    starts = [r.standard_normal(s).astype(dtype) for s in shapes]
    params = [nn.Param(em.tensor(a, device=DEVICE)) for a in starts]
    tparams = [torch.tensor(a, requires_grad=True) for a in starts]
    options = CASES[case]
    opt = getattr(optim, _cls(case))(params, **options)
    opt.multi_tensor = multi
    topt = getattr(torch.optim, _cls(case))(tparams, foreach=False, **options)
    for step in range(steps):
        if lr_changes and step in lr_changes:
            opt.lr = lr_changes[step]
            topt.param_groups[0]["lr"] = lr_changes[step]
        used = [i for i in range(len(shapes)) if not (step % 2 and i == 1)]
        targets = [r.standard_normal(shapes[i]).astype(dtype) for i in used]
        loss = None
        for i, c in zip(used, targets):
            p = params[i].value
            term = (p * em.tensor(c, device=DEVICE)).sum() + 0.5 * (p * p).sum()
            loss = term if loss is None else loss + term
        opt.step(loss.backward())
        for p in tparams:
            p.grad = None
        sum((tparams[i] * torch.tensor(c)).sum() + 0.5 * (tparams[i] ** 2).sum()
            for i, c in zip(used, targets)).backward()
        topt.step()
    return params, opt, [p.detach().numpy() for p in tparams]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_multi_tensor_equals_the_per_parameter_ops_and_torch(case, dtype):
    multi, multi_opt, expected = _train(case, dtype, multi=True, lr_changes={3: 0.003})
    single, single_opt, _ = _train(case, dtype, multi=False, lr_changes={3: 0.003})
    tol = {"float32": (2e-5, 1e-6), "float64": (1e-10, 1e-13)}[dtype]
    for i, (a, b, t) in enumerate(zip(multi, single, expected)):
        assert a.value.dtype.name == dtype and a.value.shape == SHAPES[i]
        # The same IEEE operations in the same order: the same bits.
        np.testing.assert_array_equal(a.value.numpy(), b.value.numpy(), err_msg=f"param {i}")
        np.testing.assert_allclose(a.value.numpy(), t, *tol, err_msg=f"param {i} vs torch")
        assert a.value.is_tracked
        mine, theirs = multi_opt.state[a.id], single_opt.state[b.id]
        assert set(mine) == set(theirs)
        for key, value in mine.items():
            if isinstance(value, em.Tensor):
                np.testing.assert_array_equal(value.numpy(), theirs[key].numpy(), err_msg=key)
            else:
                assert value == theirs[key], key
    assert multi_opt.statistics() == single_opt.statistics()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
def test_capturable_adam_multi_tensor_equals_the_per_parameter_ops(cls, dtype):
    """The step count and learning rate on the device, bias corrections in the prologue
    (a square root where the per-parameter ops take a power ½: within an ulp or two)."""
    results = []
    for multi in (True, False):
        em.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 7, device=DEVICE, dtype=em.float32 if dtype ==
                                        "float32" else em.float64), nn.Tanh(),
                              nn.Linear(7, 3, device=DEVICE, dtype=getattr(em, dtype)))
        opt = getattr(optim, cls)(model.parameters(), lr=0.01, weight_decay=0.1,
                                  capturable=True)
        opt.multi_tensor = multi
        x = em.tensor(_rng("x").standard_normal((4, 5)).astype(dtype), device=DEVICE)
        for k in range(4):
            opt.lr = 0.01 / (k + 1)
            opt.step((model(x) ** 2).mean().backward())
        results.append(([p.value.numpy() for p in model.parameters()],
                        [opt.state[p.id]["step"] for p in model.parameters()]))
    (multi_values, multi_steps), (single_values, _) = results
    for a, b in zip(multi_values, single_values):
        np.testing.assert_allclose(a, b, rtol=1e-6 if dtype == "float32" else 1e-14)
    assert all(isinstance(s, em.Tensor) and s.shape == () and s.item() == 4
               for s in multi_steps)


def test_one_op_per_device_and_dtype_group(monkeypatch):
    # Updates issued on the caller's thread, so that the submission counts see them (the
    # optimizer actor submits them into lanes; the trace below counts them either way).
    monkeypatch.setattr(optimizer_actor, "ACTORS", False)
    a, b = em.cpu(31).autodiff(), em.cpu(32).autodiff()
    params = [nn.Param(em.ones((3, 2), device=a)), nn.Param(em.ones(4, device=a)),
              nn.Param(em.ones(2, device=a, dtype=em.float64)),
              nn.Param(em.ones(5, device=b)), nn.Param(em.ones((), device=b))]
    opt = optim.Adam(params, lr=0.1)

    def loss(square):
        on_a = sum(((p.value * p.value if square else p.value).sum().float()
                    for p in params[1:3]), params[0].value.sum())
        on_b = sum((p.value * p.value if square else p.value).sum() for p in params[3:])
        return on_a + on_b.to(a)

    opt.step(loss(True).backward())  # the first step also makes the state (zeros)
    for _ in range(3):
        grads = loss(True).backward()
        em.sync()
        before = [em.stats(d).ops_submitted for d in (a, b)]
        opt.step(grads)
        after = [em.stats(d).ops_submitted for d in (a, b)]
        # float32 and float64 on one device, float32 on the other: three update ops.
        assert [y - x for x, y in zip(before, after)] == [2, 1]
    with em.trace() as trace:
        opt.step(loss(False).backward())
        em.sync()
    assert sum(1 for e in trace.events if e.name == multi_update.OP) == 3
    np.testing.assert_allclose(params[0].value.numpy(), 1.0 - 5 * 0.1, rtol=1e-6)


def test_parameters_of_other_dtypes_keep_the_per_parameter_ops():
    p = nn.Param(em.ones(4, device=DEVICE, dtype=em.float16))
    q = nn.Param(em.ones(4, device=DEVICE))
    opt = optim.SGD([p, q], lr=0.5, momentum=0.9)
    for _ in range(2):
        opt.step(((p.value.float() * 2).sum() + (q.value * 2).sum()).backward())
    np.testing.assert_allclose(p.value.numpy().astype(np.float32), q.value.numpy(), rtol=1e-3)
    np.testing.assert_allclose(q.value.numpy(), 1.0 - 1.0 - 1.9)


# ----- the kernels ----------------------------------------------------------------------

PROGRAMS = {
    "adam": adam._program(False, True, True, True, False),
    "adamw-capturable": adam._program(True, True, True, False, True),
    "sgd-first": sgd._program(True, True, True, True, True, False),
    "sgd-nesterov": sgd._program(False, True, True, False, False, True),
    "rmsprop": rmsprop._program(True, True, True, True),
    "adagrad": adagrad._program(False, True),
}


def _operands(program, dtype: str, shapes, seed: int):
    """A message and inputs for ``program`` over tensors of ``shapes`` (state kept
    positive where the program takes its square root)."""
    r = np.random.default_rng(seed)
    inputs, out_shapes, host = [], [], []
    for shape in shapes:
        for role in program.tensors:
            value = r.standard_normal(shape)
            if role in ("exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum"):
                value = np.abs(value) + 0.01
            elif role == "grad_avg":  # below √square_avg: centered RMSprop's root is real
                value = 0.02 * np.clip(value, -4, 4)
            inputs.append(value.astype(dtype))
        inputs += [np.array(r.integers(1, 9), dtype), np.array(0.01, dtype)][:len(
            program.scalars)]
        out_shapes += [shape] * len(program.outputs) + [()] * len(program.scalar_outputs)
        host.append(tuple(float(v) for v in r.uniform(0.05, 0.95, len(program.host))))
    msg = types.SimpleNamespace(op=multi_update.OP, attrs=(program, tuple(host)),
                                shapes=tuple(out_shapes), dtypes=(dtype,) * len(out_shapes))
    return msg, inputs


class _Pool:
    @staticmethod
    def empty(shape, dtype):
        return np.full(shape, np.nan, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_c_equals_the_numpy_fallback(name, dtype, monkeypatch):
    program = PROGRAMS[name]
    shapes = [(70000,), (3, 5), (), (0,), (1, 1), (40001,)]  # 110k elements: two threads
    msg, inputs = _operands(program, dtype, shapes, seed=len(name))
    if not cpu_update._compiles():
        pytest.skip("no C compiler")
    compiled = KERNELS[multi_update.OP](msg, _Pool, *inputs)
    assert cpu_update._function(program, dtype) is not None
    monkeypatch.setenv("EMBER_CPU_COMPILE", "0")
    fallback = KERNELS[multi_update.OP](msg, _Pool, *inputs)
    assert len(compiled) == len(fallback) == len(msg.shapes)
    for k, (a, b) in enumerate(zip(compiled, fallback)):
        assert a.shape == msg.shapes[k] and a.dtype == NP[dtype]
        if program.scalars:  # powf / pow from the C library against NumPy's power
            np.testing.assert_allclose(a, b, rtol=4 * np.finfo(dtype).eps, err_msg=str(k))
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
        assert not np.isnan(a).any()


def test_a_non_contiguous_input_is_read_through_its_strides():
    program = PROGRAMS["sgd-nesterov"]
    msg, inputs = _operands(program, "float32", [(6, 4)], seed=3)
    transposed = [np.ascontiguousarray(a.T).T for a in inputs]
    expected = KERNELS[multi_update.OP](msg, _Pool, *inputs)
    for a, b in zip(KERNELS[multi_update.OP](msg, _Pool, *transposed), expected):
        np.testing.assert_array_equal(a, b)


def test_programs_are_checked():
    with pytest.raises(ValueError, match="unknown"):
        multi_update.check(multi_update.Program("p", ("x",), (), (), (),
                                                (("y", "add", "x", "z"),), ("y",)))
    with pytest.raises(ValueError, match="reads no tensor"):
        multi_update.check(multi_update.Program("p", ("x",), (), ("a",), (),
                                                (("y", "mul", "a", 2.0),), ("y",)))
    with pytest.raises(ValueError, match="bad step"):
        multi_update.check(multi_update.Program("p", ("x",), (), (), (),
                                                (("y", "exp", "x"),), ("y",)))
    with pytest.raises(ValueError, match="outputs"):
        multi_update.check(multi_update.Program("p", ("x",), (), (), (),
                                                (("y", "neg", "x"),), ("x",)))


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_webgpu_translation_computes_the_program(name):
    """The elementwise members the WebGPU kernel evaluates, run through the NumPy
    backend's kernels of those ops: the program's numbers."""
    from ember.kernels.wgpu.multi_update import members

    program = PROGRAMS[name]
    msg, inputs = _operands(program, "float32", [(5, 3)], seed=7)
    expected = KERNELS[multi_update.OP](msg, _Pool, *inputs)
    numbers = dict(zip(program.host, msg.attrs[1][0]))
    n = len(program.tensors)

    def run(steps, slots, values, shape):
        found, args, slots = members(steps, slots, numbers, len(values), "float32")
        for member, arg in zip(found, args):
            call = types.SimpleNamespace(op=member.op, attrs=member.attrs, shape=shape,
                                         dtype=member.dtype)
            values.append(KERNELS[member.op](call, _Pool, *[values[a] for a in arg]))
        return slots, values

    slots, scalars = run(program.prologue, {r: k for k, r in enumerate(program.scalars)},
                         list(inputs[n:]), ())
    body = {r: k for k, r in enumerate(program.tensors)}
    body.update((name, n + k) for name, k in slots.items())
    body, values = run(program.body, body, list(inputs[:n]) + scalars, (5, 3))
    got = [values[body[o]] for o in program.outputs] + [scalars[slots[o]]
                                                        for o in program.scalar_outputs]
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_cuda_source_compiles_to_ptx(name, dtype, tmp_path):
    """With CuPy's options (no FMA contraction, so the CPU's rounding); and the launch
    plan covers every tensor once."""
    from ember.kernels.cupy.multi_update import OPTIONS, SLOTS, launches, source
    from tests.cuda.gpu import needs_nvcc

    if needs_nvcc.args[0]:
        pytest.skip(needs_nvcc.kwargs["reason"])
    kernel_name, code = source(PROGRAMS[name], dtype)
    (tmp_path / "k.cu").write_text(code)
    result = subprocess.run(["nvcc", "-ptx", "-arch=compute_90", *OPTIONS, str(tmp_path / "k.cu"),
                             "-o", str(tmp_path / "k.ptx")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f".entry {kernel_name}(" in (tmp_path / "k.ptx").read_text()
    sizes = [0, 5, 1 << 20] * 7
    plan = launches(PROGRAMS[name], sizes)
    assert [t for _, chunk in plan for t in chunk] == list(range(len(sizes)))
    assert all(len(chunk) <= SLOTS and blocks >= 1 for blocks, chunk in plan)
