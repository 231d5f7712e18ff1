// Runs an ONNX model that uses opbridge ops from C++: the ONNX Runtime C++ API
// with libopbridge_ort.so registered on the session options.
//
//   opbridge_ort_runner MODEL.onnx LIBRARY.so INPUT.bin OUTPUT.bin DIM...
//
// The model's first input gets float32 data of shape DIM... read from
// INPUT.bin; its first output is written to OUTPUT.bin as float32.
#include <onnxruntime_cxx_api.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: " << argv[0] << " MODEL.onnx LIBRARY.so INPUT.bin OUTPUT.bin DIM...\n";
    return 2;
  }
  try {
    std::vector<int64_t> shape;
    for (int i = 5; i < argc; ++i) shape.push_back(std::strtoll(argv[i], nullptr, 10));
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    std::vector<float> input(count);
    std::ifstream in(argv[3], std::ios::binary);
    in.read(reinterpret_cast<char*>(input.data()), static_cast<std::streamsize>(count * sizeof(float)));
    if (!in) {
      std::cerr << "could not read " << count << " floats from " << argv[3] << "\n";
      return 1;
    }

    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "opbridge_ort_runner");
    Ort::SessionOptions options;
    options.RegisterCustomOpsLibrary(argv[2]);
    Ort::Session session(env, argv[1], options);

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
