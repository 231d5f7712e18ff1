// libFuzzer target: one node of an opbridge operator in an ONNX model, read
// by OpenVINO's ONNX reader, compiled for the CPU and run, with the OpenVINO
// extension library linked in.
//
// The model is drawn by single_node_model.h (the same bytes as the ONNX
// Runtime target's, so its corpus seeds this one). The extensions are the
// library's own (create_extensions called directly, so the extension is in
// the coverage map), added to one ov::Core; each input is read from memory,
// compiled with one of a few configurations and run with start_async + wait.
//
// Expected outcomes: OpenVINO refuses the model (reading, converting,
// validating or compiling it), or the run fails, all an ov::Exception here;
// or the run succeeds. A crash, a sanitizer report, a hang, another
// exception type, or a broken invariant (checked after a successful run, as
// the ONNX Runtime target does: the outputs have the dtypes and shapes the
// spec's shape rule gives; a node with a missing required or mistyped
// attribute never runs) is a bug.
//
// Kept out, OpenVINO's own faults (tests/runtimes/test_openvino_hostile.py
// keeps each as a known case): INFERENCE_NUM_THREADS=1, where OpenVINO loses
// every error raised while the graph runs and later crashes (every
// configuration here has 2 threads); a node's domain imported at a version
// below 1 is not flagged (OpenVINO matches custom ops by domain and type),
// nor a node without outputs (the reader drops it unconverted);
// opset versions beyond the library's and cyclic graphs are never drawn (the
// reader slows down in proportion to an import's version, and allocates
// until std::bad_alloc on a cycle).
//
// Environment: as the ONNX Runtime target's (OPBRIDGE_FUZZ_VERBOSE,
// OPBRIDGE_FUZZ_DUMP, OPBRIDGE_CHECK).
#include <dlfcn.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <openvino/core/extension.hpp>
#include <openvino/openvino.hpp>
#include <string>
#include <vector>

#include "opbridge/spec.h"
#include "single_node_model.h"

// The extension library's entry point (OPENVINO_CREATE_EXTENSIONS).
extern "C" void create_extensions(std::vector<ov::Extension::Ptr>& extensions);

// oneTBB, which OpenVINO runs on, opens its topology library (libtbbbind,
// with hwloc) with RTLD_DEEPBIND, which AddressSanitizer refuses, and
// without the flag hwloc frees through the C library what the sanitizer
// allocated. This dlopen takes the place of the sanitizer's (its
// interceptors are weak symbols) and refuses libtbbbind: oneTBB then runs
// without it, as on a machine without hwloc (one NUMA node). Every other
// library is opened by the C library's dlopen.
extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using Dlopen = void* (*)(const char*, int);
  static const Dlopen real = reinterpret_cast<Dlopen>(dlsym(RTLD_NEXT, "dlopen"));
  if (file != nullptr && std::strstr(file, "libtbbbind") != nullptr) return nullptr;
  return real(file, mode);
}

namespace {

// The harness's model builder and its checks (single_node_model.h).
using namespace opbridge_fuzz;  // NOLINT(build/namespaces)

ov::Core* g_core = nullptr;
std::vector<ov::AnyMap>* g_configs = nullptr;

// ONNX's TensorProto.DataType number of an OpenVINO element type; 0 for one
// ONNX has no number for.
int OnnxType(const ov::element::Type& type) {
  struct Pair {
    ov::element::Type_t ov;
    int onnx;
  };
  static const Pair kPairs[] = {
      {ov::element::f32, 1},     {ov::element::f16, 10},   {ov::element::bf16, 16}, {ov::element::f64, 11},
      {ov::element::u8, 2},      {ov::element::i64, 7},    {ov::element::i32, 6},   {ov::element::i8, 3},
      {ov::element::boolean, 9}, {ov::element::u16, 4},    {ov::element::i16, 5},   {ov::element::u32, 12},
      {ov::element::u64, 13},    {ov::element::string, 8},
  };
  for (const Pair& p : kPairs) {
    if (type == p.ov) return p.onnx;
  }
  return 0;
}

ov::element::Type ElementType(int onnx) {
  for (ov::element::Type_t t :
       {ov::element::f32, ov::element::f16, ov::element::bf16, ov::element::f64, ov::element::u8,
        ov::element::i64, ov::element::i32, ov::element::i8, ov::element::boolean, ov::element::u16,
        ov::element::i16, ov::element::u32, ov::element::u64, ov::element::string}) {
    if (OnnxType(t) == onnx) return t;
  }
  return ov::element::dynamic;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  opbridge_fuzz::Init();
  // Kept for the life of the process, as OpenVINO keeps its plugins.
  g_core = new ov::Core();
  std::vector<ov::Extension::Ptr> extensions;
  create_extensions(extensions);
  if (extensions.empty()) {
    std::fprintf(stderr, "create_extensions gave no extension\n");
    std::abort();
  }
  g_core->add_extension(extensions);
  // Two threads (one loses errors: see above); f32 as opbridge.runtimes.openvino
  // compiles, or a float16 hint (the plugin may then run the node in
  // another dtype than the model's); the latency hint or the throughput one.
  g_configs = new std::vector<ov::AnyMap>();
  for (ov::element::Type_t precision : {ov::element::f32, ov::element::f16}) {
    for (ov::hint::PerformanceMode mode :
         {ov::hint::PerformanceMode::LATENCY, ov::hint::PerformanceMode::THROUGHPUT}) {
      g_configs->push_back({ov::inference_num_threads(2), ov::hint::inference_precision(precision),
                            ov::hint::performance_mode(mode)});
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  opbridge_fuzz::Case c = opbridge_fuzz::BuildCase(fdp, opbridge_fuzz::Specs());
  const opbridge::OpSpec& spec = *c.spec;
  const ov::AnyMap& config = (*g_configs)[fdp.ConsumeIntegralInRange<size_t>(0, g_configs->size() - 1)];
  const bool run_twice = fdp.ConsumeIntegralInRange<int>(0, 7) == 7;
  opbridge_fuzz::DumpModel(c);
  const char* stage = "read_model";
  try {
    std::shared_ptr<ov::Model> model = g_core->read_model(c.bytes, ov::Tensor());
    stage = "compile_model";
    ov::CompiledModel compiled = g_core->compile_model(model, "CPU", config);
    ov::InferRequest request = compiled.create_infer_request();
    stage = "feeding";

    // Feeds: every graph input, with its dims and data.
    std::vector<ov::Tensor> keep;
    for (Input& in : c.inputs) {
      if (!in.fed) continue;
      const ov::element::Type type = ElementType(kDtypes[in.dtype].onnx);
      const ov::Shape shape(in.dims.begin(), in.dims.end());
      ov::Tensor tensor(type, shape);
      if (in.dtype == kStringDtype) {
        std::string* strings = tensor.data<std::string>();
        const int64_t n = Elements(in.dims);
        for (int64_t k = 0; k < n; ++k) strings[k] = k < 4 ? fdp.ConsumeRandomLengthString(16) : "s";
      } else if (!in.data.empty()) {
        if (tensor.get_byte_size() != in.data.size())
          opbridge_fuzz::Violation("a feed of the wrong byte size");
        std::memcpy(tensor.data(), in.data.data(), in.data.size());
      }
      request.set_tensor(in.name, tensor);
      keep.push_back(tensor);
    }

    stage = "infer";
    for (int round = 0; round < (run_twice ? 2 : 1); ++round) {
      request.start_async();
      request.wait();
      Say("ran", spec.QualifiedName());
      // See the top of this file; a node without outputs OpenVINO's reader
      // drops without converting it (no Result uses it).
      if (c.domain_version_invalid || c.output_names.empty()) continue;
      std::vector<opbridge_fuzz::Seen> seen;
      for (const std::string& name : c.output_names) {
        const ov::Tensor out = request.get_tensor(name);
        const ov::Shape shape = out.get_shape();
        seen.push_back({opbridge_fuzz::DtypeName(OnnxType(out.get_element_type())),
                        std::vector<int64_t>(shape.begin(), shape.end())});
      }
      opbridge_fuzz::CheckOutputs(c, seen);
    }
  } catch (const ov::Exception& e) {
    Say("refused", e.what());  // a refused model or a failed run: expected
  } catch (const std::exception& e) {
    opbridge_fuzz::Violation(spec.QualifiedName() + ": " + stage +
                             " threw an exception that is not an ov::Exception: " + e.what());
  }
  return 0;
}
