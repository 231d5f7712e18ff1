"""A user library's first build against a one-file ``torch.utils.cpp_extension``
operator's, side by side in one run, both cold: fresh build folders and no
compiler cache (``CCACHE_DISABLE=1``).

- ``scaffold``: the project ``opbridge new-op`` writes (``soft_cap``: spec,
  kernel, PyTorch and ONNX Runtime libraries, both PyTorch ABIs where the
  build has them), configured and built by CMake as ``pip install`` builds
  it; the SDK's own code comes prebuilt with opbridge, so only the project's
  files compile;
- ``fused_norm`` (``--with-example``): ``examples/fused_norm``, three ops;
- ``cpp_extension``: the same ``cap * tanh(x / cap)`` with its backward
  written as one C++ file on ``torch/extension.h`` (an autograd function,
  ``TORCH_LIBRARY`` registration), built by ``torch.utils.cpp_extension.load``
  (ninja), the usual way to write a PyTorch C++ operator.

Each is built ``--repeat`` times, alternating, and the median is reported::

    python benchmarks/first_build.py [--repeat 1] [--with-example] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CPP_EXTENSION_OP = r"""
#include <torch/extension.h>

#include <cmath>

namespace {

at::Tensor SoftCapForward(const at::Tensor& x, double cap) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "soft_cap: x must be float32, got ", x.scalar_type());
  TORCH_CHECK(cap > 0, "soft_cap: cap must be > 0, got ", cap);
  auto input = x.contiguous();
  auto y = at::empty_like(input);
  const float* in = input.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const float c = static_cast<float>(cap);
  at::parallel_for(0, input.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = c * std::tanh(in[i] / c);
  });
  return y;
}

at::Tensor SoftCapBackward(const at::Tensor& grad, const at::Tensor& x, double cap) {
  auto g = grad.contiguous();
  auto input = x.contiguous();
  auto dx = at::empty_like(input);
  const float* gp = g.data_ptr<float>();
  const float* in = input.data_ptr<float>();
  float* out = dx.data_ptr<float>();
  const float c = static_cast<float>(cap);
  at::parallel_for(0, input.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float t = std::tanh(in[i] / c);
      out[i] = gp[i] * (1.0f - t * t);
    }
  });
  return dx;
}

class SoftCap : public torch::autograd::Function<SoftCap> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            double cap) {
    ctx->save_for_backward({x});
    ctx->saved_data["cap"] = cap;
    at::AutoDispatchBelowADInplaceOrView guard;
    return SoftCapForward(x, cap);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto x = ctx->get_saved_variables()[0];
    return {SoftCapBackward(grads[0], x, ctx->saved_data["cap"].toDouble()), at::Tensor()};
  }
};

at::Tensor SoftCapAutograd(const at::Tensor& x, double cap) { return SoftCap::apply(x, cap); }

}  // namespace

TORCH_LIBRARY(soft_cap_ext, m) { m.def("soft_cap(Tensor x, float cap=30.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(soft_cap_ext, CPU, m) { m.impl("soft_cap", SoftCapForward); }
TORCH_LIBRARY_IMPL(soft_cap_ext, Autograd, m) { m.impl("soft_cap", SoftCapAutograd); }
"""


def environment(jobs: int) -> dict[str, str]:
    return {
        **os.environ,
        "CCACHE_DISABLE": "1",
        "MAX_JOBS": str(jobs),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
    }


def build_project(project: Path, scratch: Path, jobs: int) -> float:
    """CMake configure and build of an SDK project, as scikit-build-core runs
    them (Release), in a fresh build folder; seconds."""
    build = scratch / f"build-{project.name}"
    shutil.rmtree(build, ignore_errors=True)
    env = environment(jobs)
    start = time.perf_counter()
    for command in (
        ["cmake", "-S", str(project), "-B", str(build), "-G", "Ninja",
         "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}"],
        ["cmake", "--build", str(build), "-j", str(jobs)],
    ):  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
    return time.perf_counter() - start


def build_cpp_extension(scratch: Path, jobs: int, index: int) -> float:
    """``torch.utils.cpp_extension.load`` of the one-file op in a fresh
    build folder, in a fresh process; seconds."""
    source = scratch / "soft_cap_ext.cpp"
    source.write_text(CPP_EXTENSION_OP)
    build = scratch / f"build-cpp-extension-{index}"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    code = (
        "import torch, torch.utils.cpp_extension as e\n"
        f"e.load('soft_cap_ext_{index}', [{str(source)!r}], build_directory={str(build)!r},"
        " extra_cflags=['-O3'], is_python_module=False, verbose=False)\n"
        "x = torch.randn(8, requires_grad=True)\n"
        "torch.ops.soft_cap_ext.soft_cap(x, 3.0).sum().backward()\n"
    )
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment(jobs)
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"cpp_extension build:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--with-example", action="store_true", help="also examples/fused_norm")
    args = parser.parse_args()
    from opbridge.sdk.scaffold import write

    times: dict[str, list[float]] = {"scaffold": [], "cpp_extension": []}
    if args.with_example:
        times["fused_norm"] = []
    with tempfile.TemporaryDirectory(prefix="opbridge-first-build-") as folder:
        scratch = Path(folder)
        scaffold = scratch / "soft_cap_project"
        write(scaffold, "soft_cap")
        for index in range(args.repeat):
            times["scaffold"].append(build_project(scaffold, scratch, args.jobs))
            times["cpp_extension"].append(build_cpp_extension(scratch, args.jobs, index))
            if args.with_example:
                example = ROOT / "examples" / "fused_norm"
                times["fused_norm"].append(build_project(example, scratch, args.jobs))
    anchor = statistics.median(times["cpp_extension"])
    print(f"cold first build, {args.jobs} jobs, no compiler cache, median of {args.repeat}:")
    print(f"{'build':<16}{'seconds':>10}{'vs cpp_extension':>20}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<16}{median:>10.1f}{median / anchor:>19.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
