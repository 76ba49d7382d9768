"""Start-up: what ``import ember`` loads, and which way the package's layers import.

``import ember`` must not load the modules only some programs need (ml_dtypes for
bfloat16, SciPy for a few special functions, matplotlib for plots, the GPU stacks);
each is imported where it is first used. And ``ember/kernels/`` does not import the
top-level package (DESIGN.md, "Layers point one way"; that it imports no
``ember.actors`` either is ``tests/test_layers.py``'s).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as em

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "ember" / "kernels"
LAZY_MODULES = ("ml_dtypes", "scipy", "matplotlib", "cupy", "wgpu", "tqdm", "torch")


def _modules_after(code: str) -> set[str]:
    """The top-level names in ``sys.modules`` after running ``code`` in a fresh Python."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {name.partition(".")[0] for name in json.loads(done.stdout.splitlines()[-1])}


def test_import_ember_loads_no_optional_module():
    loaded = _modules_after("import ember")
    assert "ember" in loaded and "numpy" in loaded
    assert loaded.isdisjoint(LAZY_MODULES), sorted(loaded & set(LAZY_MODULES))


def test_float32_work_on_the_cpu_loads_neither_ml_dtypes_nor_scipy():
    loaded = _modules_after(
        "import ember as em\n"
        "x = em.arange(12, dtype=em.float32).reshape(3, 4)\n"
        "assert (x.exp() + x * 2).sum().item() > 0\n"
        "assert em.nn.functional.softmax(x, -1).numpy().shape == (3, 4)\n"
        "assert em.tensor([1.5, 2.5]).sort()[0].numpy().tolist() == [1.5, 2.5]")
    assert loaded.isdisjoint(("ml_dtypes", "scipy")), sorted(loaded & {"ml_dtypes", "scipy"})


def test_bfloat16_loads_ml_dtypes_when_first_used():
    loaded = _modules_after(
        "import ember as em\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "assert em.bfloat16.itemsize == 2 and em.bfloat16.is_floating_point\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "x = em.tensor([1.0, 3.0], dtype=em.bfloat16)\n"
        "assert str(x.numpy().dtype) == 'bfloat16', x.numpy().dtype\n"
        "assert 'ml_dtypes' in sys.modules")
    assert "ml_dtypes" in loaded


def test_bfloat16_array_made_before_ember_reads_it():
    """An array of ml_dtypes' bfloat16 made before ember ever read ``bfloat16.np`` still
    maps to em.bfloat16 (by dtype, scalar and in a list), and computes in float32."""
    loaded = _modules_after(
        "import ml_dtypes, numpy as np\n"
        "a = np.array([1.5, -2.0, 3.0], ml_dtypes.bfloat16)\n"
        "import ember as em\n"
        "t = em.tensor(a)\n"
        "assert t.dtype is em.bfloat16, t.dtype\n"
        "assert em.from_numpy(a).dtype is em.bfloat16\n"
        "assert (t * 2).numpy().astype(np.float32).tolist() == [3.0, -4.0, 6.0]\n"
        "assert (t + a[0]).dtype is em.bfloat16\n"
        "assert em.full((2,), a[2], dtype=em.float32).numpy().tolist() == [3.0, 3.0]")
    assert "ml_dtypes" in loaded


def test_low_precision_set_holds_bfloat16_once_resolved():
    from ember import dtype as _dtype

    assert np.dtype(np.float16) in _dtype.LOW_PRECISION
    assert np.dtype(np.float32) not in _dtype.LOW_PRECISION
    assert _dtype.bfloat16.np in _dtype.LOW_PRECISION  # reading .np adds it
    assert _dtype.NUMPY_BY_NAME["bfloat16"] == _dtype.bfloat16.np
    assert _dtype.as_dtype(_dtype.bfloat16.np) is em.bfloat16
    assert _dtype.is_bfloat16(_dtype.bfloat16.np)
    assert not _dtype.is_bfloat16(np.dtype(np.float16))
    assert not _dtype.is_bfloat16(np.dtype("V2"))  # a 2-byte void is not bfloat16
    with pytest.raises(KeyError):
        _dtype.NUMPY_BY_NAME["float8"]


def test_version_module_is_the_packages():
    from ember._version import __version__

    assert em.__version__ == __version__
    assert __version__.count(".") == 2


# ----- import direction: ember/kernels/ sits below the package's public surface -----------


def _top_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` of the package itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [(node.lineno, module) for module in modules if module == "ember"]
    return found


def _kernel_files() -> list[Path]:
    files = sorted(KERNELS.rglob("*.py"))
    assert len(files) > 20 and KERNELS / "numpy" / "compiled.py" in files
    return files


def test_kernels_never_import_the_top_level_package():
    offenders = [f"{path.relative_to(KERNELS)}:{line}: {module}"
                 for path in _kernel_files()
                 for line, module in _top_level_imports(path)]
    assert not offenders, "kernels/ imports `ember` itself:\n" + "\n".join(offenders)


def test_top_level_imports_finds_each_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import ember\nfrom ember import dtype\nimport ember.actors.ir as ir\n"
                     "import ember.dtype\nfrom ember.kernels import cache\nfrom . import x\n"
                     "def f():\n    import ember\n")
    assert _top_level_imports(probe) == [(1, "ember"), (2, "ember"), (8, "ember")]
