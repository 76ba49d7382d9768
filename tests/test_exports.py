"""Pins ember's public exports: API.md's names are a contract (add freely, rename nothing)."""

from __future__ import annotations

import ember as em

# The names API.md gives under `em.` (the module-level names of API.md's sections).
API_NAMES = {
    "cpu", "cuda", "wgpu", "device", "available", "default_device", "sync", "sync_async",
    "tensor", "from_numpy", "zeros", "ones", "full", "arange", "linspace", "eye",
    "zeros_like", "ones_like", "full_like", "manual_seed", "rand", "randn", "randint",
    "float32", "float16", "bfloat16", "float64", "int32", "int64", "bool",
    "cat", "stack", "where", "from_dlpack",
    "ShapeError", "DTypeError", "DeviceError", "KernelError", "RecordError", "EmberError",
    "OutOfMemoryError",
    "run", "trace", "stats",
    "list_actors",  # second wave: the autodiff and optimizer actors
    "nn", "optim", "train", "Config",
    "save", "load", "save_safetensors", "load_safetensors",
}
# DESIGN.md's names beyond API.md: em.clear_cache() empties the on-disk kernel caches;
# em.graphed(step) captures a repeated step as a CUDA graph (issue 7, deliverable 6);
# the float32 matmul precision, torch's names (issue 7: TF32 as an opt-in setting).
EXTRA_NAMES = {"Device", "DType", "Tensor", "ActorInfo", "clear_cache", "graphed",
               "get_float32_matmul_precision", "set_float32_matmul_precision"}
# Second wave (issue 24): torch's top-level functions and dtype aliases, em.linalg, grad mode.
SECOND_WAVE_NAMES = set("""
abs neg sign floor ceil round trunc exp exp2 expm1 log log1p log2 log10 sqrt rsqrt square
sin cos tan tanh sigmoid relu erf reciprocal isnan isinf isfinite clamp clip pow maximum
minimum fmod lerp logical_not logical_and logical_or logical_xor isclose allclose
sum mean prod max min var std argmax argmin any all logsumexp cumsum sort argsort topk norm
std_mean var_mean reshape flatten squeeze unsqueeze permute transpose chunk split flip roll
clone tril triu diag diagonal repeat_interleave gather scatter_add index_select masked_fill
masked_select matmul softmax log_softmax nonzero unique add sub subtract mul multiply
true_divide floor_divide remainder eq ne lt le gt ge div einsum meshgrid det inverse t
float double half long int linalg no_grad enable_grad is_grad_enabled empty normal
asin acos atan atan2 sinh cosh asinh acosh atanh arcsin arccos arctan arctan2 arcsinh arccosh
arctanh copysign logaddexp cumprod cummax cummin logcumsumexp scatter scatter_reduce
uint8 int8 int16 short bitwise_left_shift bitwise_right_shift
autocast get_autocast_dtype is_autocast_enabled
""".split())


def test_all_lists_exactly_the_public_names():
    assert set(em.__all__) == API_NAMES | EXTRA_NAMES | SECOND_WAVE_NAMES


def test_every_public_name_resolves():
    for name in em.__all__:
        assert getattr(em, name) is not None, name


def test_submodule_names_of_the_api():
    from ember import nn, optim, train

    for name in ("Module", "Param", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool2d",
                 "AvgPool2d", "AdaptiveAvgPool2d", "Embedding", "LayerNorm", "RMSNorm",
                 "BatchNorm2d", "GroupNorm", "Dropout", "MultiHeadAttention",
                 "TransformerEncoderLayer", "LSTM", "GRU", "Sequential", "ReLU", "GELU", "SiLU",
                 "Tanh", "functional", "F", "init", "Conv3d", "MaxPool3d", "AvgPool3d"):
        assert hasattr(nn, name), name
    for name in ("relu", "gelu", "silu", "softmax", "log_softmax", "cross_entropy", "mse_loss",
                 "binary_cross_entropy_with_logits", "linear", "conv2d", "max_pool2d",
                 "avg_pool2d", "embedding", "layer_norm", "dropout",
                 "scaled_dot_product_attention", "conv3d", "max_pool3d", "avg_pool3d"):
        assert hasattr(nn.functional, name), name
    for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "clip_grad_norm", "GradScaler"):
        assert hasattr(optim, name), name
    for name in ("StepLR", "CosineAnnealingLR", "LinearWarmup", "ExponentialLR"):
        assert hasattr(optim.lr_scheduler, name), name
    for name in ("DataLoader", "Learner", "Metric", "History"):
        assert hasattr(train, name), name
    assert em.Config is nn.Config


def test_error_hierarchy_matches_api():
    assert issubclass(em.ShapeError, (em.EmberError, ValueError))
    assert issubclass(em.DeviceError, (em.EmberError, ValueError))
    assert issubclass(em.DTypeError, em.EmberError) and issubclass(em.DTypeError, TypeError)
    assert issubclass(em.KernelError, em.EmberError) and issubclass(em.KernelError, RuntimeError)
    assert issubclass(em.RecordError, em.EmberError) and issubclass(em.RecordError, ValueError)


def test_tensor_methods_of_the_api_exist():
    methods = """numpy item tolist exp log log1p sqrt rsqrt abs neg sign floor ceil round sin cos
    tanh sigmoid relu gelu silu erf reciprocal clamp pow maximum minimum isnan isinf sum mean
    prod max min var std argmax argmin any all logsumexp cumsum sort argsort topk matmul reshape
    flatten squeeze unsqueeze permute transpose expand repeat chunk split gather scatter_add
    index_select masked_fill index_put to astype detach __dlpack__ require_grad backward grad
    asin acos atan atan2 sinh cosh asinh acosh atanh copysign logaddexp cumprod cummax cummin
    logcumsumexp scatter scatter_reduce unfold"""
    missing = [m for m in methods.split() if not hasattr(em.Tensor, m)]
    assert not missing, missing
    for prop in ("shape", "dtype", "device", "ndim", "T", "is_tracked"):
        assert hasattr(em.Tensor, prop), prop


def test_devices_parse_and_compare():
    assert em.device("cpu") == em.cpu(0) and em.device("cpu:1") == em.cpu(1)
    assert str(em.cuda(1)) == "cuda:1" and str(em.wgpu()) == "wgpu:0"
    assert em.cpu().autodiff() != em.cpu() and em.cpu().autodiff().inner == em.cpu()
    assert em.cpu().autodiff().is_autodiff and not em.cpu().is_autodiff
    assert em.default_device() == em.cpu(0)
    assert em.available("cuda") == [] or all(d.kind == "cuda" for d in em.available("cuda"))
    assert em.available("nonsense") == []


def test_clear_cache_empties_the_ember_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kept = tmp_path / "ember" / "cuda" / "kernel.cubin"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"x")
    em.clear_cache()
    assert not (tmp_path / "ember").exists()
    em.clear_cache()  # nothing there: still fine


def test_distributed_names_of_the_api():
    # API.md's "Past one machine": `from ember import distributed as dist`, RayCluster; the
    # NCCL all-reduce usable without Ray. Importing it starts nothing and needs no ray.
    import subprocess
    import sys

    from ember import distributed as dist

    assert set(dist.__all__) == {"RayCluster", "NcclCommunicator", "nccl_unique_id"}
    for name in dist.__all__:
        assert getattr(dist, name).__doc__, name
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, ember.distributed; "
                               "print('ray' in sys.modules)"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "False"
