"""The gradient harness (tests/ops ``GRAD_CASES``) on wgpu:0.

The harness's cases are float64, which WGSL lacks, and finite differences
in float32 would be noise; so each case runs in float32 on wgpu:0 and on
the CPU, and the wgpu vector-Jacobian products must match the CPU's (whose
own backward the CPU harness checks against finite differences and torch).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.errors import DeviceError, DTypeError
from tests.ops.grad_harness import GradCase, ember_vjp
from tests.ops.test_gradients import GRAD_CASES

WGPU = em.available("wgpu")
pytestmark = pytest.mark.skipif(not WGPU, reason="no wgpu adapter (install a Vulkan driver, "
                                                 "e.g. mesa-vulkan-drivers)")

# float32 on two devices that sum in different orders (a guess with headroom: most
# cases agree to ~1e-6; products and pow amplify rounding).
RTOL, ATOL = 2e-4, 2e-5


def _in_float32(case: GradCase) -> GradCase:
    inputs = [v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64
              else v for v in case.inputs]
    return GradCase(case.id, case.fn, inputs, case.wrt, case.torch_fn)


@pytest.mark.parametrize("checkpointing", [None, "balanced"], ids=["plain", "balanced"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_the_cpu(case: GradCase, checkpointing: str | None) -> None:
    case = _in_float32(case)
    out_cpu, _, want = ember_vjp(case, em.cpu(0).autodiff(checkpointing))
    try:
        out, _, got = ember_vjp(case, WGPU[0].autodiff(checkpointing))
    except DTypeError as exc:  # refused at the call (a float64 cast): WGSL has no float64
        pytest.skip(f"{WGPU[0]}: {exc}")
    except DeviceError as exc:  # an op the backend declares it does not run (linalg)
        pytest.skip(f"{WGPU[0]}: {exc}")
    np.testing.assert_allclose(out, out_cpu, rtol=RTOL, atol=ATOL, err_msg=f"{case.id} forward")
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{case.id} grad {i}")
