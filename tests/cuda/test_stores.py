"""Which members a group's kernel stores (kernels/cupy/stores.py), on the CPU: a new
pattern takes the widest kernel so far, a pattern met often gets its own, never while a
graph captures; an alias of a stored member shares its buffer. On a GPU: a softmax read
by autodiff stores its output once, and its values are right."""

from __future__ import annotations

import numpy as np

import ember as em
import ember.nn.functional as F
from ember.ir import Call
from ember.kernels.cupy.stores import EXACT_AFTER, StoreChoice, shared_aliases
from tests.cuda.gpu import needs_gpu

SITE = ("t.py", 1)
WIDE = (True, True, True)
NARROW = (False, True, True)


def test_the_first_pattern_is_exact_and_a_wider_one_widens_the_structure():
    choice = StoreChoice()
    assert choice.stored("s", NARROW) == NARROW
    assert choice.stored("s", (True, False, True)) == WIDE  # the union
    assert choice.stored("other", (True, False, False)) == (True, False, False)


def test_a_narrower_pattern_takes_the_wide_kernel_until_met_often():
    choice = StoreChoice()
    choice.stored("s", WIDE)
    got = [choice.stored("s", NARROW) for _ in range(EXACT_AFTER + 2)]
    assert got[:EXACT_AFTER - 1] == [WIDE] * (EXACT_AFTER - 1)
    assert got[EXACT_AFTER - 1:] == [NARROW] * 3
    assert choice.stored("s", WIDE) == WIDE  # the wide pattern keeps its kernel


def test_a_capture_never_makes_a_pattern_exact_but_uses_one_made_before():
    choice = StoreChoice()
    choice.stored("s", WIDE)
    assert [choice.stored("s", NARROW, lambda: True) for _ in range(2 * EXACT_AFTER)] == \
        [WIDE] * (2 * EXACT_AFTER)
    for _ in range(EXACT_AFTER):
        choice.stored("s", NARROW)
    assert choice.stored("s", NARROW, lambda: True) == NARROW


def test_patterns_of_another_length_restart_the_structure():
    choice = StoreChoice()
    choice.stored("s", WIDE)
    assert choice.stored("s", (True,)) == (True,)


def _call(op, out, inputs, shape=(4, 8), dtype="float32"):
    return Call(op, out, inputs, ("float32",) if op != "alias" else (), shape, dtype, SITE)


def test_a_stored_alias_of_a_stored_member_shares_its_buffer():
    # slots: 0 = input; members 0 exp, 1 alias(exp), 2 alias(alias), 3 neg, 4 alias(input)
    members = [_call("exp", 10, (0,)), _call("alias", 11, (10,)), _call("alias", 12, (11,)),
               _call("neg", 13, (10,)), _call("alias", 14, (0,))]
    steps = [(0, (0,)), (1, (1,)), (2, (2,)), (3, (1,)), (4, (0,))]
    assert shared_aliases(members, steps, 1, (True, True, True, True, True)) == {1: 0, 2: 0}
    # The source not stored: the alias stores the values itself.
    assert shared_aliases(members, steps, 1, (False, True, False, True, True)) == {}
    # Another dtype (a reinterpretation is no alias of the same bytes): its own store.
    members[1] = _call("alias", 11, (10,), dtype="float16")
    assert shared_aliases(members, steps, 1, (True,) * 5) == {}


@needs_gpu
def test_a_softmax_saved_for_backward_stores_once_and_its_gradient_is_right():
    device = em.cuda(0)
    fused = device.actor.backend.fused
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    g = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)

    def run(dev):
        d = dev.autodiff()
        t = em.from_numpy(x, device=d).require_grad()
        y = F.softmax(t * 0.5)
        grads = (y * em.from_numpy(g, device=d)).sum().backward()
        return y.numpy(), grads.get(t).numpy()

    fused.last_error = None
    (y, dx), (y_cpu, dx_cpu) = run(device), run(em.cpu())
    assert fused.last_error is None, fused.last_error
    np.testing.assert_allclose(y, y_cpu, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dx, dx_cpu, rtol=1e-4, atol=1e-6)
    # The softmax's saved output (autodiff's alias of it) shares the stored one's buffer.
    assert any(launch.shared for launch in fused._launches.values())


def test_the_store_choice_bounds_what_it_remembers():
    choice = StoreChoice()
    for k in range(5000):
        choice.stored(("s", k), WIDE)
    assert len(choice._widest) == 4096
    assert choice.stored(("s", 4999), NARROW) == NARROW  # unremembered: as it comes
