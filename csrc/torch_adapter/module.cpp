// The Python extension module of an operator library (opbridge._C for the
// built-in operators, <name>_torch for a user's): a thin layer over the
// library's PyTorch kernels beside it, which hold the kernels, the specs and
// the registrations and no Python: lib<name>_torch_kernels.so (adapter.cpp,
// the default ABI) under the torch it was built with, else
// lib<name>_torch_stable_kernels.so (stable_adapter.cpp, LibTorch's stable
// ABI) where the build made one (OPBRIDGE_TORCH_STABLE_FALLBACK). Importing
// the module loads them and registers nothing (lib<name>_torch[_stable].so,
// which registers when loaded, is for hosts); the module exposes the
// library's identity and specs so that the Python side (ONNX export, ONNX
// Runtime sessions, documentation) reads the same contract, and registers
// every spec with PyTorch when register_operators() is called:
// opbridge.load_library calls it once its checks pass, so a refused library
// leaves no operator behind.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "opbridge/spec.h"
#include "opbridge/version.h"
#include "torch_adapter/interface.h"

namespace py = pybind11;

namespace {

namespace adapter = opbridge::torch_adapter;

#ifndef OPBRIDGE_TORCH_LIBRARY_FILE
#error "the build names the PyTorch library (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif

// This module's file, from the loader.
std::string ModulePath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ModulePath), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// major.minor of a version text ("2.13.0+cpu" -> {2, 13}); {-1, -1} if none.
[[maybe_unused]] std::pair<int, int> MinorVersion(const std::string& text) {
  int major = -1;
  int minor = -1;
  if (std::sscanf(text.c_str(), "%d.%d", &major, &minor) != 2) return {-1, -1};
  return {major, minor};
}

// Which PyTorch library this module loads, and why: the default-ABI one
// under the torch it was built with, the stable-ABI one (where built) under
// any other from its target on; OPBRIDGE_TORCH_ADAPTER=default|stable forces one.
struct TorchLibraryChoice {
  std::string file;
  bool stable = false;
  std::string reason;
};

TorchLibraryChoice ChooseTorchLibrary([[maybe_unused]] const std::string& module) {
  const std::string running = py::str(py::module_::import("torch").attr("__version__"));
  const std::string built = OPBRIDGE_TORCH_VERSION;
#if defined(OPBRIDGE_TORCH_STABLE_ABI)
  return {OPBRIDGE_TORCH_LIBRARY_FILE, true,
          "built on the stable ABI only (torch " OPBRIDGE_TORCH_TARGET_VERSION " and later); torch " +
              running + " is running"};
#elif defined(OPBRIDGE_TORCH_STABLE_LIBRARY_FILE)
  const char* forced = std::getenv("OPBRIDGE_TORCH_ADAPTER");
  const std::string force = forced != nullptr ? forced : "";
  if (force == "default") {
    return {OPBRIDGE_TORCH_LIBRARY_FILE, false,
            "OPBRIDGE_TORCH_ADAPTER=default (built with torch " + built + ")"};
  }
  if (force == "stable") {
    return {OPBRIDGE_TORCH_STABLE_LIBRARY_FILE, true, "OPBRIDGE_TORCH_ADAPTER=stable"};
  }
  if (!force.empty()) {
    throw py::import_error("opbridge: " + module +
                           ": OPBRIDGE_TORCH_ADAPTER must be 'default' or 'stable' (or unset), got '" +
                           force + "'");
  }
  const auto now = MinorVersion(running);
  if (now == MinorVersion(built)) {
    return {OPBRIDGE_TORCH_LIBRARY_FILE, false,
            "torch " + running + " is the torch it was built with (" + built + ")"};
  }
  if (now < MinorVersion(OPBRIDGE_TORCH_TARGET_VERSION)) {
    throw py::import_error("opbridge: " + module +
                           " runs under torch " OPBRIDGE_TORCH_TARGET_VERSION
                           " and later (its stable-ABI library) or under torch " +
                           built + " (its build's), not under torch " + running +
                           "; rebuild it against this torch");
  }
  return {OPBRIDGE_TORCH_STABLE_LIBRARY_FILE, true,
          "torch " + running + " is not the torch it was built with (" + built +
              "): the stable-ABI library serves torch " OPBRIDGE_TORCH_TARGET_VERSION " and later"};
#else
  return {OPBRIDGE_TORCH_LIBRARY_FILE, false,
          "the only PyTorch library built (with torch " + built + "); torch " + running + " is running"};
#endif
}

// The kernels of a PyTorch library lib<name>_torch[_stable].so:
// lib<name>_torch[_stable]_kernels.so, beside it.
std::string KernelsFile(const std::string& library) {
  return library.substr(0, library.size() - 3) + "_kernels.so";
}

// Loads the chosen PyTorch library's kernels from beside this module (not
// the library itself, which registers its operators when loaded: here
// opbridge.load_library registers once its checks pass; RTLD_LOCAL: its
// symbols stay its own) and reads their table; kept loaded for the
// process's life.
const adapter::Interface& LoadTorchLibrary(const std::string& module, const TorchLibraryChoice& choice) {
  const std::string folder = module.substr(0, module.find_last_of('/') + 1);
  const std::string path = folder + KernelsFile(choice.file);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    throw py::import_error("opbridge: " + module + " could not load its PyTorch library " + path + " (" +
                           choice.reason + "): " + (error != nullptr ? error : "unknown error") +
                           " (it is built and installed beside the module)");
  }
  using Lookup = const adapter::Interface* (*)(uint32_t);
  const auto lookup = reinterpret_cast<Lookup>(dlsym(handle, "opbridge_torch_adapter_interface"));
  const adapter::Interface* table = lookup != nullptr ? lookup(adapter::kInterfaceVersion) : nullptr;
  if (table == nullptr || table->cxx11_abi != static_cast<bool>(_GLIBCXX_USE_CXX11_ABI)) {
    throw py::import_error("opbridge: " + path + " is not the PyTorch library " + module +
                           " was built with (another build of opbridge?); rebuild the library");
  }
  return *table;
}

const adapter::Interface* api = nullptr;

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
    entry["type"] = api->attr_type_name(attr.type);
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
  // The values each input or output takes beyond finite ones (ValueSet), by
  // name: "-inf", "+inf", "nan"; a tensor not named takes finite values only.
  py::dict values;
  for (const opbridge::ValueDomain& domain : spec.value_domains) {
    py::list taken = values.contains(domain.tensor) ? py::list(values[domain.tensor]) : py::list();
    if (domain.values & opbridge::kNegInfValues) taken.append("-inf");
    if (domain.values & opbridge::kPosInfValues) taken.append("+inf");
    if (domain.values & opbridge::kNaNValues) taken.append("nan");
    values[domain.tensor] = taken;
  }
  result["values"] = values;
  result["torch_schema"] = api->torch_schema(spec);
  result["backward_schema"] = api->backward_schema(spec);
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
  py::list backward_optional;
  for (const auto& output : spec.backward.outputs) {
    backward_outputs.append(output.name);
    backward_optional.append(output.optional);
  }
  py::dict backward;
  backward["inputs"] = backward_inputs;
  backward["outputs"] = backward_outputs;
  // Per output: computed only when output_mask asks (else always).
  backward["optional_outputs"] = backward_optional;
  backward["input_grads"] = spec.backward.input_grads;
  result["backward"] = spec.has_backward() ? py::object(backward) : py::object(py::none());
  result["torch_namespace"] = api->this_library().torch_namespace;
  result["onnx_domain"] = api->this_library().onnx_domain;
  // Whether this build registered CUDA kernels for the op (kernel.cu).
  result["cuda"] = api->has_cuda_kernels(spec);
  return result;
}

// Attributes from Python, in spec order: numbers, strings, lists of numbers.
std::vector<opbridge::AttrValue> AttrsOf(const py::list& attrs) {
  std::vector<opbridge::AttrValue> values;
  for (const py::handle item : attrs) {
    if (py::isinstance<py::str>(item)) {
      values.emplace_back(item.cast<std::string>());
    } else if (py::isinstance<py::sequence>(item)) {
      values.emplace_back(item.cast<std::vector<double>>());
    } else {
      values.emplace_back(item.cast<double>());
    }
  }
  return values;
}

// A shape rule's symbolic sizes from Python: the fake kernels of a
// stable-ABI library (opbridge/_stable.py) pass torch.SymInts, on which the
// rule's arithmetic and comparisons run as Python's (PyTorch decides and
// guards a comparison; reading a size as a number specializes it). An
// unknown size (-1, where the caller has none) is unknown to the rule as in
// a runtime's shape inference (opbridge::UnknownDims): compared as -1, and
// what is computed from it is unknown, -1. A Python error is kept and raised
// once the rule has returned: it never unwinds through the library.
class PySymbols final : public opbridge::DimSymbols {
 public:
  opbridge::Dim DimOf(const py::handle& size) {
    if (py::isinstance<py::int_>(size)) {
      const int64_t value = size.cast<int64_t>();
      return value < 0 ? opbridge::Dim::Symbol(Keep(py::none())) : opbridge::Dim(value);
    }
    return opbridge::Dim::Symbol(Keep(py::reinterpret_borrow<py::object>(size)));
  }
  // The size: an int or a SymInt; -1 where unknown.
  py::object SizeOf(const opbridge::Dim& d) const {
    if (!d.symbolic()) return py::int_(static_cast<int64_t>(d));
    const py::object& size = sizes_.at(static_cast<size_t>(d.symbol()));
    return size.is_none() ? py::object(py::int_(-1)) : size;
  }
  void RaiseKeptError() const {
    if (error_) std::rethrow_exception(error_);
  }

  int64_t Apply(opbridge::DimOp op, const opbridge::Dim& a, const opbridge::Dim& b) override {
    if (Unknown(a) || Unknown(b)) return Keep(py::none());
    return Keep(Guarded(py::object(py::int_(0)), [&] {
      const py::object x = SizeOf(a), y = SizeOf(b);
      switch (op) {
        case opbridge::DimOp::kAdd:
          return Checked(PyNumber_Add(x.ptr(), y.ptr()));
        case opbridge::DimOp::kSub:
          return Checked(PyNumber_Subtract(x.ptr(), y.ptr()));
        case opbridge::DimOp::kMul:
          return Checked(PyNumber_Multiply(x.ptr(), y.ptr()));
        case opbridge::DimOp::kDiv:
          return Checked(PyNumber_FloorDivide(x.ptr(), y.ptr()));
        case opbridge::DimOp::kMod:
          return Checked(PyNumber_Remainder(x.ptr(), y.ptr()));
        case opbridge::DimOp::kMin:
          return py::object(py::module_::import("torch").attr("sym_min")(x, y));
        case opbridge::DimOp::kMax:
          return py::object(py::module_::import("torch").attr("sym_max")(x, y));
      }
      return x;
    }));
  }
  bool Compare(opbridge::DimCompare op, const opbridge::Dim& a, const opbridge::Dim& b) override {
    static constexpr int kPyOps[] = {Py_EQ, Py_NE, Py_LT, Py_LE, Py_GT, Py_GE};
    return Guarded(false, [&] {
      const py::object result =
          Checked(PyObject_RichCompare(SizeOf(a).ptr(), SizeOf(b).ptr(), kPyOps[static_cast<int>(op)]));
      return py::bool_(result).cast<bool>();
    });
  }
  int64_t Specialize(const opbridge::Dim& a) override {
    return Guarded(int64_t{-1}, [&] { return py::int_(SizeOf(a)).cast<int64_t>(); });
  }
  std::string Name(const opbridge::Dim& a) override {
    if (Unknown(a)) return "?";
    return Guarded(std::string("?"), [&] { return py::str(SizeOf(a)).cast<std::string>(); });
  }

 private:
  bool Unknown(const opbridge::Dim& d) const {
    return d.symbolic() && sizes_.at(static_cast<size_t>(d.symbol())).is_none();
  }
  static py::object Checked(PyObject* result) {
    if (result == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(result);
  }
  int64_t Keep(py::object size) {
    sizes_.push_back(std::move(size));
    return static_cast<int64_t>(sizes_.size() - 1);
  }
  template <typename T, typename Body>
  T Guarded(T fallback, Body&& body) {
    if (error_) return fallback;
    try {
      return body();
    } catch (...) {
      error_ = std::current_exception();
      return fallback;
    }
  }

  std::vector<py::object> sizes_;
  std::exception_ptr error_;
};

// The inputs of infer / infer_backward: (present, dtype, sizes), each size
// an int (-1: unknown) or a torch.SymInt.
std::vector<opbridge::TensorInfo> InfosOf(const py::list& inputs, PySymbols* symbols) {
  std::vector<opbridge::TensorInfo> infos;
  for (const py::handle item : inputs) {
    const py::tuple input = py::reinterpret_borrow<py::tuple>(item);
    opbridge::TensorInfo info;
    info.present = input[0].cast<bool>();
    info.dtype = input[1].cast<std::string>();
    for (const py::handle size : py::reinterpret_borrow<py::sequence>(input[2])) {
      info.shape.push_back(symbols->DimOf(size));
    }
    infos.push_back(std::move(info));
  }
  return infos;
}

// (dtype, sizes) per output, each size an int or the SymInt the rule computed.
py::list Results(const std::vector<opbridge::TensorInfo>& outputs, const PySymbols& symbols) {
  py::list result;
  for (const auto& out : outputs) {
    py::list sizes;
    for (const opbridge::Dim& d : out.shape) sizes.append(symbols.SizeOf(d));
    result.append(py::make_tuple(out.dtype, sizes));
  }
  return result;
}

// Runs `rule` with `symbols` as the library's symbolic sizes on this thread.
template <typename Rule>
opbridge::Status WithSymbols(PySymbols* symbols, Rule&& rule) {
  opbridge::DimSymbols* previous = api->set_dim_symbols(symbols);
  opbridge::Status status;
  try {
    status = rule();
  } catch (...) {
    api->set_dim_symbols(previous);
    throw;
  }
  api->set_dim_symbols(previous);
  symbols->RaiseKeptError();
  return status;
}

}  // namespace

#ifndef OPBRIDGE_MODULE_NAME
#error "the build names the module (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif
#ifndef OPBRIDGE_ORT_LIBRARY_FILE
#error "the build names the ONNX Runtime library (opbridge_add_operator_library in cmake/opbridge.cmake)"
#endif

PYBIND11_MODULE(OPBRIDGE_MODULE_NAME, m) {
  const std::string module = ModulePath();
  const TorchLibraryChoice choice = ChooseTorchLibrary(module);
  api = &LoadTorchLibrary(module, choice);
  const opbridge::LibraryInfo& library = api->this_library();
  m.doc() = "opbridge operator library: registers its operators with PyTorch";
  // The opbridge SDK this library was built with.
  m.attr("OPBRIDGE_VERSION") = opbridge::kVersion;
  m.attr("__version__") = library.version;
  m.attr("LIBRARY_NAME") = library.name;
  m.attr("TORCH_NAMESPACE") = library.torch_namespace;
  // File names, beside this module, of the library's ONNX Runtime custom-op
  // library, of its PyTorch library for this torch (for hosts: it registers
  // when loaded) and of that library's kernels (what this module loaded).
  m.attr("ORT_LIBRARY") = OPBRIDGE_ORT_LIBRARY_FILE;
  m.attr("TORCH_LIBRARY") = choice.file;
  m.attr("TORCH_KERNELS_LIBRARY") = KernelsFile(choice.file);
  // Every PyTorch library built beside the module: the default-ABI one
  // first, then the stable-ABI one where built.
#if defined(OPBRIDGE_TORCH_STABLE_LIBRARY_FILE)
  m.attr("TORCH_LIBRARIES") =
      std::vector<std::string>{OPBRIDGE_TORCH_LIBRARY_FILE, OPBRIDGE_TORCH_STABLE_LIBRARY_FILE};
#else
  m.attr("TORCH_LIBRARIES") = std::vector<std::string>{OPBRIDGE_TORCH_LIBRARY_FILE};
#endif
  // Which one was loaded ("default" or "stable") and why.
  m.attr("TORCH_ADAPTER") = choice.stable ? "stable" : "default";
  m.attr("TORCH_ADAPTER_REASON") = choice.reason;
  // Build facts for `opbridge doctor`.
  m.attr("BUILD_COMPILER") = "g++ " __VERSION__;
  m.attr("BUILD_CXX11_ABI") = static_cast<bool>(_GLIBCXX_USE_CXX11_ABI);
  m.attr("BUILD_TORCH_VERSION") = OPBRIDGE_TORCH_VERSION;
#ifdef OPBRIDGE_WITH_CUDA
  m.attr("BUILD_CUDA") = true;
#else
  m.attr("BUILD_CUDA") = false;
#endif
  // A library on LibTorch's stable ABI (stable_adapter.cpp) registers its
  // schemas and CPU kernels in C++; opbridge.load_library adds the fake
  // kernels and the autograd formulas from Python, and checks for taken names.
  m.attr("STABLE_ABI") = choice.stable;
#ifdef OPBRIDGE_TORCH_TARGET_VERSION
  m.attr("TORCH_TARGET_VERSION") = OPBRIDGE_TORCH_TARGET_VERSION;
#endif
  m.def("runtime_checks_enabled", api->runtime_checks_enabled);
  m.def("register_operators", api->register_operators,
        "Registers the library's operators with PyTorch (all or none; again: nothing).");
  m.def("operators_registered", api->operators_registered);
  m.def("operators_taken_elsewhere", api->operators_taken_elsewhere,
        "The operators this library would register that PyTorch already has ('ns::op', 'ns::op.out').");
  m.def("set_output_guards", api->set_output_guards, py::arg("enabled"),
        "Guards every kernel output of this library (always on under OPBRIDGE_CHECK=1).");
  m.def("output_guards_enabled", api->output_guards_enabled);
  m.attr("ONNX_DOMAIN") = library.onnx_domain;
  m.attr("ONNX_DOMAIN_VERSION") = library.domain_version;
  // The ONNX Runtime releases the custom-op library supports (version.h).
  m.attr("ORT_API_FLOOR") = opbridge::kOrtApiFloor;
  m.attr("ORT_NEWEST_TESTED") = opbridge::kOrtNewestTested;
  // The spec's shape rule, for the Python side (legacy export output types,
  // a stable-ABI library's fake kernels). inputs: [(present, dtype, sizes)],
  // each size an int (-1: unknown) or a torch.SymInt; attrs (in spec order:
  // numbers, strings, lists of numbers) when known. Gives (dtype, sizes) per
  // output, a size computed from SymInts as a SymInt.
  m.def(
      "infer",
      [](const std::string& name, const py::list& inputs, const std::optional<py::list>& attrs) {
        const opbridge::OpSpec* spec = api->find_spec(name);
        if (spec == nullptr)
          throw py::value_error(std::string(api->this_library().name) + ": no operator named '" + name + "'");
        PySymbols symbols;
        const std::vector<opbridge::TensorInfo> infos = InfosOf(inputs, &symbols);
        std::vector<opbridge::TensorInfo> outputs;
        const opbridge::Status status = WithSymbols(&symbols, [&] {
          if (attrs.has_value()) return api->infer_with_attrs(*spec, infos, AttrsOf(*attrs), &outputs);
          return spec->infer(infos, &outputs);
        });
        if (!status.ok()) throw py::value_error(status.message());
        return Results(outputs, symbols);
      },
      py::arg("name"), py::arg("inputs"), py::arg("attrs") = py::none());
  // The backward's rule (backward_rule.h), for the fake kernels of a
  // stable-ABI library: inputs as infer's, in the backward's order.
  m.def(
      "infer_backward",
      [](const std::string& name, const py::list& inputs, const py::list& attrs) {
        const opbridge::OpSpec* spec = api->find_spec(name);
        if (spec == nullptr || !spec->has_backward())
          throw py::value_error(std::string(api->this_library().name) + ": no operator named '" + name +
                                "' with a backward");
        PySymbols symbols;
        const std::vector<opbridge::TensorInfo> infos = InfosOf(inputs, &symbols);
        std::vector<opbridge::TensorInfo> outputs;
        const opbridge::Status status = WithSymbols(
            &symbols, [&] { return api->infer_backward(*spec, infos, AttrsOf(attrs), &outputs); });
        if (!status.ok()) throw py::value_error(status.message());
        return Results(outputs, symbols);
      },
      py::arg("name"), py::arg("inputs"), py::arg("attrs"));
  // SIMD dispatch of the kernels (process-wide; shared with the ONNX Runtime
  // library when both are loaded, as both use the same Highway runtime).
  m.def("simd_targets", api->simd_targets,
        "SIMD targets compiled in and supported by this CPU, widest first.");
  m.def("simd_target", api->simd_target, "The SIMD target the kernels dispatch to now.");
  m.def("simd_default_target", api->simd_default_target,
        "The SIMD target used when none is forced (see opbridge/simd.h).");
  m.def(
      "set_simd_target",
      [](const std::string& name) {
        const opbridge::Status status = api->set_simd_target(name);
        if (!status.ok()) throw py::value_error(status.message());
      },
      py::arg("name"), "Forces one of simd_targets(); an empty name restores the best.");
  m.def("specs", []() {
    py::list specs;
    for (const opbridge::OpSpec* spec : api->all_specs()) specs.append(SpecToDict(*spec));
    return specs;
  });
}
