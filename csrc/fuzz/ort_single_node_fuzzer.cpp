// libFuzzer target: one node of an opbridge operator in an ONNX model, loaded
// and run by ONNX Runtime with the custom-op library linked in.
//
// The model is drawn by single_node_model.h (what it varies, what it keeps
// out). The session is created from memory with RegisterCustomOps called
// directly (so the library is in the coverage map), and run.
//
// Expected outcomes: the session refuses the model, or Run fails (both an
// Ort::Exception here, the client side), or Run succeeds. A crash, a
// sanitizer report, a hang, or a broken invariant (checked after a
// successful run: the outputs have the dtypes and shapes the spec's shape
// rule gives for the fed inputs and the attributes the node carries; a node
// with a missing required or mistyped attribute never runs) is a bug.
//
// Environment: OPBRIDGE_FUZZ_VERBOSE=1 prints each outcome (the error
// message of a refused model), OPBRIDGE_FUZZ_DUMP=<file> writes the model
// (to read it with onnx.load when reproducing one input), OPBRIDGE_CHECK=1
// turns on the library's run-time checks (read once, at start).
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "opbridge/spec.h"
#include "single_node_model.h"

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base);

namespace {

// The harness's model builder and its checks (single_node_model.h).
using namespace opbridge_fuzz;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------
// The runtime: one environment and a few session configurations, made once.

Ort::Env* g_env = nullptr;
std::vector<Ort::SessionOptions>* g_options = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  Ort::InitApi(OrtGetApiBase()->GetApi(ORT_API_VERSION));
  opbridge_fuzz::Init();
  // Kept for the life of the process, like ONNX Runtime keeps the ops.
  g_env = new Ort::Env(ORT_LOGGING_LEVEL_FATAL, "opbridge_fuzz");
  g_options = new std::vector<Ort::SessionOptions>();
  // One intra-op thread or two (KernelContext_ParallelFor runs tasks on the
  // pool), graph optimisations off or all on.
  for (int threads : {1, 2}) {
    for (GraphOptimizationLevel level : {ORT_DISABLE_ALL, ORT_ENABLE_ALL}) {
      Ort::SessionOptions options;
      options.SetIntraOpNumThreads(threads);
      options.SetInterOpNumThreads(1);
      options.SetGraphOptimizationLevel(level);
      options.SetLogSeverityLevel(ORT_LOGGING_LEVEL_FATAL);
      if (OrtStatus* status = RegisterCustomOps(options, OrtGetApiBase())) {
        std::fprintf(stderr, "RegisterCustomOps failed: %s\n", Ort::GetApi().GetErrorMessage(status));
        std::abort();
      }
      g_options->push_back(std::move(options));
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  opbridge_fuzz::Case c = opbridge_fuzz::BuildCase(fdp, opbridge_fuzz::Specs());
  const opbridge::OpSpec& spec = *c.spec;
  std::vector<Input>& inputs = c.inputs;
  if (c.domain_version_invalid) c.invalid = "the domain version";

  Ort::SessionOptions& options = (*g_options)[fdp.ConsumeIntegralInRange<size_t>(0, g_options->size() - 1)];
  const bool run_twice = fdp.ConsumeIntegralInRange<int>(0, 7) == 7;

  opbridge_fuzz::DumpModel(c);
  try {
    Ort::Session session(*g_env, c.bytes.data(), c.bytes.size(), options);

    // Feeds: every graph input, with its dims and data.
    Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    Ort::AllocatorWithDefaultOptions allocator;
    std::vector<Ort::Value> values;
    std::vector<const char*> names;
    char dummy[8] = {0};
    for (size_t i = 0; i < inputs.size(); ++i) {
      Input& in = inputs[i];
      if (!in.fed) continue;
      const opbridge_fuzz::Dtype& dt = kDtypes[in.dtype];
      Ort::Value value{nullptr};
      if (in.dtype == kStringDtype) {
        value = Ort::Value::CreateTensor(allocator, in.dims.data(), in.dims.size(),
                                         ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING);
        const int64_t n = Elements(in.dims);
        std::vector<std::string> strings(static_cast<size_t>(n));
        std::vector<const char*> ptrs;
        for (int64_t k = 0; k < n; ++k) {
          strings[k] = k < 4 ? fdp.ConsumeRandomLengthString(16) : "s";
          ptrs.push_back(strings[k].c_str());
        }
        if (n > 0) value.FillStringTensor(ptrs.data(), ptrs.size());
      } else {
        void* p = in.data.empty() ? static_cast<void*>(dummy) : static_cast<void*>(&in.data[0]);
        value = Ort::Value::CreateTensor(cpu, p, in.data.size(), in.dims.data(), in.dims.size(),
                                         static_cast<ONNXTensorElementDataType>(dt.onnx));
      }
      if (in.sequence) {
        std::vector<Ort::Value> one;
        one.push_back(std::move(value));
        value = Ort::Value::CreateSequence(one);
      }
      values.push_back(std::move(value));
      names.push_back(in.name.c_str());
    }
    std::vector<const char*> out_names;
    for (const std::string& n : c.output_names) out_names.push_back(n.c_str());

    for (int round = 0; round < (run_twice ? 2 : 1); ++round) {
      std::vector<Ort::Value> outputs = session.Run(Ort::RunOptions{nullptr}, names.data(), values.data(),
                                                    values.size(), out_names.data(), out_names.size());
      Say("ran", spec.QualifiedName());

      // The invariant: a node that runs is valid, and its outputs are what the
      // spec's shape rule says for these inputs and attributes.
      std::vector<opbridge_fuzz::Seen> seen;
      for (const Ort::Value& out : outputs) {
        auto info = out.GetTensorTypeAndShapeInfo();
        seen.push_back({opbridge_fuzz::DtypeName(static_cast<int>(info.GetElementType())), info.GetShape()});
      }
      opbridge_fuzz::CheckOutputs(c, seen);
    }
  } catch (const Ort::Exception& e) {
    Say("refused", e.what());  // a refused model or a failed run: expected
  }
  return 0;
}
