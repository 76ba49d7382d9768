#!/usr/bin/env bash
# The WebGPU backend on an H200 through Vulkan: the op, gradient and wgpu test suites on
# wgpu:0, then bench_wgpu at bench_fusion's shapes. Needs the Vulkan/GL loader debs in
# .gl/ and the wgpu 0.31.1 wheels (with cffi, pycparser, rendercanvas, trio, msgspec ...)
# in .whl/, both carried (see /work/.library/device/README.md, "Headless rendering").
# Results go to $OUT (or ./wgpu-h200-out).
set -uo pipefail
out=${OUT:-wgpu-h200-out}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps .whl/*.whl
export WGPU_BACKEND_TYPE=Vulkan XDG_RUNTIME_DIR
XDG_RUNTIME_DIR=$(mktemp -d)
if ! python3 -c "import ember as em, sys; d = em.available('wgpu'); print(d); sys.exit(not d)"; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  python3 -c "import ember as em; print('with VK_DRIVER_FILES:', em.available('wgpu'))"
fi
python3 -c "import ember as em; print(em.wgpu(0).actor.backend.rt.adapter_name)" | tee "$out/adapter.txt"
start=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="-rfs" \
  tests/ops/test_ops.py -k wgpu >"$out/tests.log" 2>&1
echo "op harness on wgpu:0: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/tests.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="-rfs" tests/wgpu \
  >>"$out/tests.log" 2>&1
echo "tests/wgpu: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/tests.log"
tail -n 40 "$out/tests.log"
timeout 200 python3 -m benchmarks.bench_wgpu --large 2>&1 | grep -v "^WARNING" | tee "$out/bench_wgpu.md"
