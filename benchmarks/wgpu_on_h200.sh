#!/usr/bin/env bash
# The WebGPU backend on an H200 through Vulkan, in one device call: every wgpu:0 test (the
# op harness tests/ops/test_ops.py, the gradient harness tests/wgpu/test_gradient_harness.py,
# the rest of tests/wgpu and the device-parametrized tests elsewhere, all selected by
# `-k wgpu`) in one pytest run over 8 workers (each opens its own wgpu device); then, only
# with WGPU_BENCH=1, bench_wgpu at bench_fusion's shapes.
# Needs the Vulkan/GL loader debs in .gl/ and the wgpu 0.31.1 wheels (with cffi, pycparser,
# rendercanvas, trio, msgspec ...) in .whl/, both carried (see
# /work/.library/device/README.md, "Headless rendering"); pytest-xdist and pytest-timeout
# come with the machine's image. Results go to $OUT (or ./wgpu-h200-out): adapter.txt,
# tests.log (failures with short tracebacks, the 25 slowest tests), junit.xml, summary.txt
# (counts per test file).
set -uo pipefail
out=${OUT:-wgpu-h200-out}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps .whl/*.whl
export WGPU_BACKEND_TYPE=Vulkan XDG_RUNTIME_DIR PYTHONUNBUFFERED=1
XDG_RUNTIME_DIR=$(mktemp -d)
if ! python3 -c "import ember as em, sys; d = em.available('wgpu'); print(d); sys.exit(not d)"; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  python3 -c "import ember as em; print('with VK_DRIVER_FILES:', em.available('wgpu'))"
fi
python3 -c "import ember as em; rt = em.wgpu(0).actor.backend.rt; print(rt.adapter_name)
from ember.kernels.wgpu.runtime import adapters; a = adapters()[0]; print(a.info)
print('adapter max-storage-buffers-per-shader-stage:', a.limits['max-storage-buffers-per-shader-stage'])" \
  | tee "$out/adapter.txt"
start=$(date +%s)

# Spread over 8 of the 16 cores where pytest-xdist is there; a test stuck past 60 s fails
# alone (its worker is replaced) instead of the whole run meeting the outer cap.
spread=()
python3 -c "import xdist" 2>/dev/null && spread=(-n 8)
python3 -c "import pytest_timeout" 2>/dev/null && spread+=(--timeout=60 --timeout-method=thread)
timeout -k 10 "${WGPU_TEST_CAP:-240}" python3 -m pytest -q -p no:cacheprovider \
  -o addopts="" -rfE --tb=short --durations=25 "${spread[@]}" \
  --junitxml="$out/junit.xml" --ignore=tests/cuda tests -k wgpu >"$out/tests.log" 2>&1
echo "wgpu:0 tests (${spread[*]}): exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/tests.log"
python3 - "$out/junit.xml" <<'EOF' | tee "$out/summary.txt"
# Passed / failed / skipped per test file, from pytest's JUnit XML.
import collections, sys, xml.etree.ElementTree as ET
counts = collections.defaultdict(collections.Counter)
for case in ET.parse(sys.argv[1]).iter("testcase"):
    outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
    counts[case.get("classname", "?")][outcome] += 1
for name, c in sorted(counts.items()):
    print(f"{name}: {c['passed']} passed, {c['failure'] + c['error']} failed, {c['skipped']} skipped")
EOF
tail -n 40 "$out/tests.log"
if [ "${WGPU_BENCH:-0}" = 1 ]; then timeout 200 python3 -m benchmarks.bench_wgpu --large 2>&1 | grep -v "^WARNING" | tee "$out/bench_wgpu.md"; fi
