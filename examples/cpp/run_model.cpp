// Runs an ONNX model that uses an opbridge operator library from C++: the
// ONNX Runtime C++ API, with the library (libopbridge_ort.so, or a user's
// lib<name>_ort.so) registered on the session options after the model's
// domain versions are checked against the library's own.
//
//   run_model MODEL.onnx LIBRARY.so INPUT.bin OUTPUT.bin DIM...
//   run_model --info LIBRARY.so      prints the library's OpbridgeLibraryInfo()
//
// The model's first input gets float32 data of shape DIM... read from
// INPUT.bin; its first output is written to OUTPUT.bin as float32. Built by
// examples/cpp/CMakeLists.txt (find_package(opbridge) and the
// opbridge::onnxruntime target); see docs/guides/cpp-host.md.
#include <dlfcn.h>
#include <onnxruntime_cxx_api.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "model_domains.h"
#include "ort_adapter/library_info.h"

namespace {

// An opbridge operator library, opened to ask it what it implements. ONNX
// Runtime opens the same file again when the library is registered (the
// same loaded copy: the loader keeps one per file).
struct OpLibrary {
  std::string path;
  OpbridgeDomainVersionFn domain_version = nullptr;
  const char* info = nullptr;  // OpbridgeLibraryInfo(): its JSON
};

bool OpenLibrary(const std::string& path, OpLibrary* library, std::string* error) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *error = "cannot load " + path + ": " + dlerror();
    return false;
  }
  auto info = reinterpret_cast<OpbridgeLibraryInfoFn>(dlsym(handle, OPBRIDGE_LIBRARY_INFO_SYMBOL));
  auto domain_version =
      reinterpret_cast<OpbridgeDomainVersionFn>(dlsym(handle, OPBRIDGE_DOMAIN_VERSION_SYMBOL));
  if (info == nullptr || domain_version == nullptr) {
    *error = path + " is not an opbridge operator library of this SDK (it lacks " OPBRIDGE_LIBRARY_INFO_SYMBOL
                    " and " OPBRIDGE_DOMAIN_VERSION_SYMBOL "); rebuild it with opbridge_add_operator_library";
    return false;
  }
  library->path = path;
  library->info = info();
  library->domain_version = domain_version;
  return true;
}

// "" when the library implements every version of its domains the model
// asks for, else why not. Domains the library does not implement are left to
// ONNX Runtime (the standard ones, or another library's).
std::string CheckDomainVersions(const std::string& model, const std::map<std::string, int64_t>& wanted,
                                const OpLibrary& library) {
  for (const auto& [domain, version] : wanted) {
    const int64_t implemented = library.domain_version(domain.c_str());
    if (implemented < 0) continue;
    if (version < 1 || version > implemented) {
      return model + " needs ONNX domain '" + domain + "' version " + std::to_string(version) + ", but " +
             library.path + " implements versions 1 to " + std::to_string(implemented) +
             (version < 1 ? "; a domain's versions start at 1" : "; use a newer build of the library");
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--info") {
    std::string error;
    OpLibrary library;
    if (!OpenLibrary(argv[2], &library, &error)) {
      std::cerr << "error: " << error << "\n";
      return 1;
    }
    std::cout << library.info << "\n";
    return 0;
  }
  if (argc < 6) {
    std::cerr << "usage: " << argv[0] << " MODEL.onnx LIBRARY.so INPUT.bin OUTPUT.bin DIM...\n"
              << "       " << argv[0] << " --info LIBRARY.so\n";
    return 2;
  }
  const std::string model_path = argv[1];
  const std::string library_path = argv[2];
  try {
    std::string error;
    OpLibrary library;
    std::map<std::string, int64_t> wanted;
    if (!OpenLibrary(library_path, &library, &error) ||
        !opbridge_host::ReadModelDomains(model_path, &wanted, &error)) {
      std::cerr << "error: " << error << "\n";
      return 1;
    }
    error = CheckDomainVersions(model_path, wanted, library);
    if (!error.empty()) {
      std::cerr << "error: " << error << "\n";
      return 1;
    }

    std::vector<int64_t> shape;
    for (int i = 5; i < argc; ++i) shape.push_back(std::strtoll(argv[i], nullptr, 10));
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    std::vector<float> input(count);
    std::ifstream in(argv[3], std::ios::binary);
    in.read(reinterpret_cast<char*>(input.data()), static_cast<std::streamsize>(count * sizeof(float)));
    if (!in) {
      std::cerr << "error: could not read " << count << " floats from " << argv[3] << "\n";
      return 1;
    }

    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "opbridge_run_model");
    Ort::SessionOptions options;
    options.RegisterCustomOpsLibrary(library_path.c_str());
    Ort::Session session(env, model_path.c_str(), options);

    Ort::AllocatorWithDefaultOptions allocator;
    const std::string input_name = session.GetInputNameAllocated(0, allocator).get();
    const std::string output_name = session.GetOutputNameAllocated(0, allocator).get();
    auto memory = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    Ort::Value tensor =
        Ort::Value::CreateTensor<float>(memory, input.data(), input.size(), shape.data(), shape.size());
    const char* input_names[] = {input_name.c_str()};
    const char* output_names[] = {output_name.c_str()};
    auto outputs = session.Run(Ort::RunOptions{nullptr}, input_names, &tensor, 1, output_names, 1);

    const auto info = outputs[0].GetTensorTypeAndShapeInfo();
    const float* data = outputs[0].GetTensorData<float>();
    std::ofstream out(argv[4], std::ios::binary);
    out.write(reinterpret_cast<const char*>(data),
              static_cast<std::streamsize>(info.GetElementCount() * sizeof(float)));
    std::cout << "ok " << info.GetElementCount() << " values\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
