#!/usr/bin/env bash
# One device call on an H200 machine: the CUDA test suite (alongside the WebGPU tests of
# wgpu_on_h200.sh, capped by WGPU_TEST_CAP), then, unless CUDA_BENCH=0, bench_cuda alone
# (its timings want a quiet machine) and bench_wgpu alone. Each step has a time cap, and
# its log lands in $OUT as it goes, so a call cut short still returns what ran.
# Needs .whl/ (trio, msgspec, ... and wgpu's wheels) and .gl/ (Vulkan loader debs) carried.
set -uo pipefail
out=${OUT:-cuda-h200-out}
mkdir -p "$out/wgpu"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
# The loaders first, once: every pytest worker then sees the same devices when it collects.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:.
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c "import cupy, torch; from cupy.cuda import nccl
print('cupy', cupy.__version__, 'torch', torch.__version__, 'nccl', nccl.get_version())"
} >"$out/machine.txt" 2>&1
# The WebGPU suites in the background while the CUDA suite runs: both are tests, not timings.
# Without PYTHONPATH: pip would find the wheels in /tmp/site and skip installing them where
# the tests' own subprocesses (which set their own path) look.
env -u PYTHONPATH OUT="$out/wgpu" WGPU_TEST_CAP=150 WGPU_BENCH=0 timeout 200 \
  bash benchmarks/wgpu_on_h200.sh >"$out/wgpu/run.log" 2>&1 &
wgpu_tests=$!
start=$(date +%s)
timeout 160 python3 -m pytest -q -p no:cacheprovider -n 14 --timeout 100 -o addopts="-rfE" \
  tests -k cuda >"$out/suite.log" 2>&1
echo "tests -k cuda: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/suite.log"
tail -n 25 "$out/suite.log"
wait "$wgpu_tests"
tail -n 12 "$out/wgpu/tests.log"
[ "${CUDA_BENCH:-1}" = 0 ] && exit 0
start=$(date +%s)
timeout 140 python3 benchmarks/bench_cuda.py mlp_step encoder_layer data_parallel \
  kernel_bandwidth elementwise launch_overhead matmul_sweep 2>&1 | tee "$out/bench_cuda.md"
echo "bench_cuda: after $(( $(date +%s) - start )) s" | tee -a "$out/bench_cuda.md"
WGPU_BACKEND_TYPE=Vulkan XDG_RUNTIME_DIR=$(mktemp -d) timeout 95 \
  python3 -m benchmarks.bench_wgpu --large 2>&1 | grep -v "^WARNING" | tee "$out/wgpu/bench_wgpu.md"
