#!/usr/bin/env bash
# One device call on a two-H200 machine: the CUDA test suite (alongside the WebGPU tests
# of wgpu_on_h200.sh, whose timeouts are shortened here), then bench_cuda alone (its
# timings want a quiet machine), then bench_wgpu alone. Each step has a time cap, and
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
sed -e 's/timeout 150/timeout 75/' -e '/bench_wgpu/d' benchmarks/wgpu_on_h200.sh >/tmp/wgpu_tests.sh
OUT=$out/wgpu timeout 165 bash /tmp/wgpu_tests.sh >"$out/wgpu/run.log" 2>&1 &
wgpu_tests=$!
start=$(date +%s)
timeout 160 python3 -m pytest -q -p no:cacheprovider -n 14 --timeout 100 -o addopts="-rfE" \
  tests -k cuda >"$out/suite.log" 2>&1
echo "tests -k cuda: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/suite.log"
tail -n 25 "$out/suite.log"
wait "$wgpu_tests"
start=$(date +%s)
timeout 140 python3 benchmarks/bench_cuda.py mlp_step encoder_layer data_parallel \
  kernel_bandwidth elementwise launch_overhead matmul_sweep 2>&1 | tee "$out/bench_cuda.md"
echo "bench_cuda: after $(( $(date +%s) - start )) s" | tee -a "$out/bench_cuda.md"
# bench_wgpu, with the preamble of wgpu_on_h200.sh (loaders, wheels, adapter) before it.
{ sed -n '1,/^start=/p' benchmarks/wgpu_on_h200.sh
  grep 'bench_wgpu --large' benchmarks/wgpu_on_h200.sh | sed 's/timeout 200/timeout 95/'
} >/tmp/wgpu_bench.sh
OUT=$out/wgpu bash /tmp/wgpu_bench.sh >>"$out/wgpu/run.log" 2>&1
tail -n 30 "$out/wgpu/bench_wgpu.md" "$out/wgpu/tests.log"
