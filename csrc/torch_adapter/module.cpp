// The Python extension module of an operator library (opbridge._C for the
// built-in operators, <name>_torch for a user's). It exposes the library's
// identity and specs so that the Python side (ONNX export, ONNX Runtime
// sessions, documentation) reads the same contract, and registers every spec
// with PyTorch (torch_adapter/adapter.cpp) when register_operators() is
// called: opbridge.load_library calls it once its checks pass (importing the
// module registers nothing, so a refused library leaves no operator behind).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "opbridge/cuda.h"
#include "opbridge/library.h"
#include "opbridge/runtime_checks.h"
#include "opbridge/simd.h"
#include "opbridge/spec.h"
#include "opbridge/version.h"
#include "torch_adapter/registration.h"

namespace py = pybind11;

namespace {

py::dict SpecToDict(const opbridge::OpSpec& spec) {
  py::list inputs;
  for (const auto& input : spec.inputs) {
    py::dict entry;
    entry["name"] = input.name;
    entry["optional"] = input.optional;
    inputs.append(entry);
  }
  py::list attrs;
  for (const auto& attr : spec.attrs) {
    py::dict entry;
    entry["name"] = attr.name;
    entry["type"] = opbridge::AttrTypeName(attr.type);
    if (attr.has_default && attr.type == opbridge::AttrType::kString) {
      entry["default"] = attr.default_text ? attr.default_text : "";
    } else if (attr.has_default && attr.type == opbridge::AttrType::kFloats) {
      entry["default"] = py::list();
    } else if (attr.has_default) {
      entry["default"] = attr.default_value;
    } else {
      entry["default"] = py::none();
    }
    attrs.append(entry);
  }
  py::dict result;
  result["name"] = spec.name;
  result["onnx_type"] = spec.onnx_type;
  result["doc"] = spec.doc;
  result["inputs"] = inputs;
  result["attrs"] = attrs;
  result["outputs"] = spec.outputs;
  result["torch_schema"] = spec.TorchSchema();
  result["backward_schema"] = spec.BackwardSchema();
  // What each backward tensor stands for: its inputs (the gradient of a
  // forward output, a saved forward input or output, by index), and for each
  // forward input the backward output holding its gradient (-1: none).
  py::list backward_inputs;
  for (const auto& input : spec.backward.inputs) {
    py::dict entry;
    entry["name"] = input.name;
    entry["source"] = input.source == opbridge::TensorSource::kGradOutput ? "grad_output"
                      : input.source == opbridge::TensorSource::kInput    ? "input"
                                                                          : "output";
    entry["index"] = input.index;
    backward_inputs.append(entry);
  }
  py::list backward_outputs;
  for (const auto& output : spec.backward.outputs) backward_outputs.append(output.name);
  py::dict backward;
  backward["inputs"] = backward_inputs;
  backward["outputs"] = backward_outputs;
  backward["input_grads"] = spec.backward.input_grads;
  result["backward"] = spec.has_backward() ? py::object(backward) : py::object(py::none());
  result["torch_namespace"] = opbridge::ThisLibrary().torch_namespace;
  result["onnx_domain"] = opbridge::ThisLibrary().onnx_domain;
  // Whether this build registered CUDA kernels for the op (kernel.cu).
  result["cuda"] = opbridge::FindCudaKernels(spec) != nullptr;
  return result;
}

}  // namespace

#ifndef OPBRIDGE_MODULE_NAME
#error "the build names the module (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif
#ifndef OPBRIDGE_ORT_LIBRARY_FILE
#error "the build names the ONNX Runtime library (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif

PYBIND11_MODULE(OPBRIDGE_MODULE_NAME, m) {
  const opbridge::LibraryInfo& library = opbridge::ThisLibrary();
  m.doc() = "opbridge operator library: registers its operators with PyTorch";
  // The opbridge SDK this library was built with.
  m.attr("OPBRIDGE_VERSION") = opbridge::kVersion;
  m.attr("__version__") = library.version;
  m.attr("LIBRARY_NAME") = library.name;
  m.attr("TORCH_NAMESPACE") = library.torch_namespace;
  // File name of the library's ONNX Runtime custom-op library, beside this module.
  m.attr("ORT_LIBRARY") = OPBRIDGE_ORT_LIBRARY_FILE;
  // Build facts for `opbridge doctor`.
  m.attr("BUILD_COMPILER") = "g++ " __VERSION__;
  m.attr("BUILD_CXX11_ABI") = static_cast<bool>(_GLIBCXX_USE_CXX11_ABI);
  m.attr("BUILD_TORCH_VERSION") = OPBRIDGE_TORCH_VERSION;
#ifdef OPBRIDGE_WITH_CUDA
  m.attr("BUILD_CUDA") = true;
#else
  m.attr("BUILD_CUDA") = false;
#endif
  m.def("runtime_checks_enabled", &opbridge::RuntimeChecksEnabled);
  namespace adapter = opbridge::torch_adapter;
  m.def("register_operators", &adapter::RegisterOperators,
        "Registers the library's operators with PyTorch (all or none; again: nothing).");
  m.def("operators_registered", &adapter::OperatorsRegistered);
  m.def("operators_taken_elsewhere", &adapter::OperatorsTakenElsewhere,
        "The operators this library would register that PyTorch already has ('ns::op', 'ns::op.out').");
  m.def("set_output_guards", &adapter::SetOutputGuards, py::arg("enabled"),
        "Guards every kernel output of this library (always on under OPBRIDGE_CHECK=1).");
  m.def("output_guards_enabled", &adapter::OutputGuardsEnabled);
  m.attr("ONNX_DOMAIN") = library.onnx_domain;
  m.attr("ONNX_DOMAIN_VERSION") = library.domain_version;
  // The ONNX Runtime releases the custom-op library supports (version.h).
  m.attr("ORT_API_FLOOR") = opbridge::kOrtApiFloor;
  m.attr("ORT_NEWEST_TESTED") = opbridge::kOrtNewestTested;
  // The spec's shape rule, for the Python side (legacy export output types).
  // inputs: [(present, dtype, shape with -1 for unknown dims)]; attrs (in
  // spec order: numbers, strings, lists of numbers) when known.
  m.def(
      "infer",
      [](const std::string& name,
         const std::vector<std::tuple<bool, std::string, std::vector<int64_t>>>& inputs,
         const std::optional<py::list>& attrs) {
        const opbridge::OpSpec* spec = opbridge::FindSpec(name);
        if (spec == nullptr)
          throw py::value_error(std::string(opbridge::ThisLibrary().name) + ": no operator named '" + name +
                                "'");
        std::vector<opbridge::TensorInfo> infos;
        for (const auto& [present, dtype, shape] : inputs) infos.push_back({present, dtype, shape});
        std::vector<opbridge::TensorInfo> outputs;
        opbridge::Status status;
        if (attrs.has_value()) {
          std::vector<opbridge::AttrValue> values;
          for (const py::handle item : *attrs) {
            if (py::isinstance<py::str>(item)) {
              values.emplace_back(item.cast<std::string>());
            } else if (py::isinstance<py::sequence>(item)) {
              values.emplace_back(item.cast<std::vector<double>>());
            } else {
              values.emplace_back(item.cast<double>());
            }
          }
          status = opbridge::InferWithAttrs(*spec, infos, values, &outputs);
        } else {
          status = spec->infer(infos, &outputs);
        }
        if (!status.ok()) throw py::value_error(status.message());
        std::vector<std::pair<std::string, std::vector<int64_t>>> result;
        for (const auto& out : outputs) result.emplace_back(out.dtype, out.shape);
        return result;
      },
      py::arg("name"), py::arg("inputs"), py::arg("attrs") = py::none());
  // SIMD dispatch of the kernels (process-wide; shared with the ONNX Runtime
  // library when both are loaded, as both use the same Highway runtime).
  m.def("simd_targets", &opbridge::SimdTargets,
        "SIMD targets compiled in and supported by this CPU, widest first.");
  m.def("simd_target", &opbridge::SimdTarget, "The SIMD target the kernels dispatch to now.");
  m.def("simd_default_target", &opbridge::SimdDefaultTarget,
        "The SIMD target used when none is forced (see opbridge/simd.h).");
  m.def(
      "set_simd_target",
      [](const std::string& name) {
        const opbridge::Status status = opbridge::SetSimdTarget(name);
        if (!status.ok()) throw py::value_error(status.message());
      },
      py::arg("name"), "Forces one of simd_targets(); an empty name restores the best.");
  m.def("specs", []() {
    py::list specs;
    for (const opbridge::OpSpec* spec : opbridge::AllSpecs()) specs.append(SpecToDict(*spec));
    return specs;
  });
}
