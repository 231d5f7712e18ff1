// Runs an AOTInductor model package (.pt2) whose graph calls opbridge
// operators, from C++ with libtorch and no Python. The package calls the
// operators through PyTorch's dispatcher, so they are registered first:
// opbridge's own from libopbridge_torch.so (linked), and a user's operator
// library from its lib<name>_torch.so (--library, opened here), each with
// opbridge_register_torch_operators().
//
//   aoti_run MODEL.pt2 INPUT.bin OUTPUT.bin DIM... [--library LIB_torch.so]...
//
// The model's input gets float32 data of shape DIM... read from INPUT.bin;
// its first output is written to OUTPUT.bin as float32, and its shape to
// stdout. Built by examples/aoti_cpp/CMakeLists.txt; see
// docs/guides/pytorch-native.md.
#include <ATen/ATen.h>
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "torch_adapter/torch_library.h"

namespace {

using RegisterFn = const char* (*)();

// Registers an operator library's operators; "" when done, else why not.
std::string Register(const std::string& what, RegisterFn register_operators) {
  const char* error = register_operators();
  return error == nullptr ? "" : what + ": " + error;
}

// A user's PyTorch operator library: loaded, and registered through its own
// entry point (dlsym on its handle: every library exports the same name).
std::string RegisterLibrary(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return "cannot load " + path + ": " + dlerror();
  auto entry = reinterpret_cast<RegisterFn>(dlsym(handle, "opbridge_register_torch_operators"));
  if (entry == nullptr) {
    return path +
           " is not an opbridge PyTorch library (it lacks opbridge_register_torch_operators); "
           "build it with opbridge_add_operator_library";
  }
  return Register(path, entry);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::vector<std::string> libraries;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--library" && i + 1 < argc) {
      libraries.emplace_back(argv[++i]);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 4) {
    std::cerr << "usage: aoti_run MODEL.pt2 INPUT.bin OUTPUT.bin DIM... [--library LIB_torch.so]...\n";
    return 2;
  }
  try {
    // Before the package is loaded: its loader looks its operators up.
    std::string error = Register("libopbridge_torch.so", &opbridge_register_torch_operators);
    for (const std::string& library : libraries) {
      if (!error.empty()) break;
      error = RegisterLibrary(library);
    }
    if (!error.empty()) {
      std::cerr << "aoti_run: " << error << "\n";
      return 1;
    }

    std::vector<int64_t> shape;
    for (size_t i = 3; i < positional.size(); ++i) shape.push_back(std::stoll(positional[i]));
    at::Tensor input = at::empty(shape, at::kFloat);
    std::ifstream in(positional[1], std::ios::binary);
    const auto bytes = static_cast<std::streamsize>(input.numel() * sizeof(float));
    if (!in.read(reinterpret_cast<char*>(input.data_ptr<float>()), bytes)) {
      std::cerr << "aoti_run: " << positional[1] << " holds fewer than " << bytes << " bytes\n";
      return 1;
    }

    torch::inductor::AOTIModelPackageLoader loader(positional[0]);
    const std::vector<at::Tensor> outputs = loader.run({input});
    const at::Tensor output = outputs.at(0).contiguous().to(at::kFloat);
    std::ofstream out(positional[2], std::ios::binary);
    out.write(reinterpret_cast<const char*>(output.data_ptr<float>()),
              static_cast<std::streamsize>(output.numel() * sizeof(float)));
    std::cout << "output shape:";
    for (const int64_t size : output.sizes()) std::cout << " " << size;
    std::cout << "\n";
  } catch (const std::exception& error) {
    std::cerr << "aoti_run: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
