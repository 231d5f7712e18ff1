// Runs an ONNX model that uses an opbridge operator library from C++: the
// ONNX Runtime C++ API, with the library (libopbridge_ort.so, or a user's
// lib<name>_ort.so) registered on the session options after the model's
// domain versions are checked against the library's own.
//
//   run_model MODEL.onnx LIBRARY.so --input NAME=FILE:DIMxDIM [--input ...]
//             [--output NAME=FILE ...] [--output-dir DIR]
//   run_model MODEL.onnx LIBRARY.so INPUT.bin OUTPUT.bin DIM...
//   run_model --info LIBRARY.so      prints the library's OpbridgeLibraryInfo()
//
// Every input of the model is given once, as the raw bytes of the element
// type the model declares for it (float32, float64, float16, bfloat16,
// int8/16/32/64, uint8/16/32/64 or bool, one byte each 0 or 1), with its
// shape ("2x8x64"; empty for a scalar). Every output is written as the raw
// bytes of its element type: to the FILE of its --output, else to
// DIR/NAME.bin. The second, older form runs a model of one input: that
// input from INPUT.bin (of its declared type) with shape DIM..., the first
// output to OUTPUT.bin. Built by examples/cpp/CMakeLists.txt
// (find_package(opbridge) and the opbridge::onnxruntime target); see
// docs/guides/cpp-host.md.
#include <dlfcn.h>
#include <onnxruntime_cxx_api.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
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

// The element types run_model reads and writes as raw bytes, with their
// sizes; any other (string, complex, float8, int4) is refused by name.
struct ElementType {
  ONNXTensorElementDataType type;
  const char* name;
  size_t size;
};

constexpr ElementType kElementTypes[] = {
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "float32", 4},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, "float64", 8},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, "float16", 2},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, "bfloat16", 2},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, "int8", 1},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, "uint8", 1},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, "int16", 2},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, "uint16", 2},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, "int32", 4},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, "uint32", 4},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, "int64", 8},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, "uint64", 8},
    {ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, "bool", 1},
};

const ElementType* FindElementType(ONNXTensorElementDataType type) {
  for (const auto& known : kElementTypes) {
    if (known.type == type) return &known;
  }
  return nullptr;
}

std::string ElementTypeName(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING:
      return "string";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64:
      return "complex64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128:
      return "complex128";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ:
      return "float8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4:
      return "uint4";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4:
      return "int4";
    default:
      break;
  }
  const ElementType* known = FindElementType(type);
  return known != nullptr ? known->name : "element type " + std::to_string(static_cast<int>(type));
}

std::string SupportedTypes() {
  std::string names;
  for (const auto& known : kElementTypes) names += (names.empty() ? "" : ", ") + std::string(known.name);
  return names;
}

// "2x8x64", "scalar" for no dimensions; a dimension the model leaves open
// is its symbolic name, or "?".
std::string ShapeText(const std::vector<int64_t>& shape, const std::vector<std::string>& names = {}) {
  if (shape.empty()) return "scalar";
  std::string text;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += "x";
    if (shape[i] >= 0) {
      text += std::to_string(shape[i]);
    } else {
      text += i < names.size() && !names[i].empty() ? names[i] : "?";
    }
  }
  return text;
}

// A tensor input or output of the session, as the model declares it.
struct Port {
  std::string name;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;          // -1 where the model leaves a dimension open
  std::vector<std::string> dim_names;  // symbolic names of the open ones
  bool is_tensor = false;

  std::string Declared() const {
    if (!is_tensor) return name + " (not a tensor)";
    return name + " (" + ElementTypeName(type) + ", " + ShapeText(shape, dim_names) + ")";
  }
};

Port ReadPort(const std::string& name, const Ort::TypeInfo& info) {
  Port port;
  port.name = name;
  port.is_tensor = info.GetONNXType() == ONNX_TYPE_TENSOR;
  if (!port.is_tensor) return port;
  const auto tensor = info.GetTensorTypeAndShapeInfo();
  port.type = tensor.GetElementType();
  port.shape = tensor.GetShape();
  std::vector<const char*> names(port.shape.size(), nullptr);
  if (!names.empty()) tensor.GetSymbolicDimensions(names.data(), names.size());
  for (const char* dim : names) port.dim_names.push_back(dim != nullptr ? dim : "");
  return port;
}

std::string PortList(const std::vector<Port>& ports) {
  std::string list;
  for (const auto& port : ports) list += (list.empty() ? "" : ", ") + port.Declared();
  return list;
}

// One --input NAME=FILE:DIMS, or the older form's INPUT.bin DIM...
struct InputArg {
  std::string name;  // "" in the older form: the model's only input
  std::string file;
  std::vector<int64_t> shape;
};

// The command line, parsed; the model is not read yet.
struct Command {
  std::string model;
  std::string library;
  std::vector<InputArg> inputs;
  std::map<std::string, std::string> outputs;  // name -> file ("" name: the first output)
  std::string output_dir;
  bool older_form = false;
};

bool ParseDim(const std::string& text, int64_t* dim) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *dim = value;
  return true;
}

// "2x8x64" (or "" for a scalar).
bool ParseShape(const std::string& text, std::vector<int64_t>* shape) {
  shape->clear();
  if (text.empty()) return true;
  size_t start = 0;
  while (true) {
    const size_t end = text.find('x', start);
    int64_t dim = 0;
    if (!ParseDim(text.substr(start, end - start), &dim)) return false;
    shape->push_back(dim);
    if (end == std::string::npos) return true;
    start = end + 1;
  }
}

void Usage(std::ostream& out, const char* program) {
  const std::string indent(std::string(program).size() + 8, ' ');
  out << "usage: " << program << " MODEL.onnx LIBRARY.so --input NAME=FILE:DIMxDIM [--input ...]\n"
      << indent << "[--output NAME=FILE ...] [--output-dir DIR]\n"
      << "       " << program
      << " MODEL.onnx LIBRARY.so INPUT.bin OUTPUT.bin DIM...   (a model of one input)\n"
      << "       " << program << " --info LIBRARY.so\n"
      << "Every input of the model is given once: FILE holds the raw bytes of the element type the\n"
         "model declares for it, DIMxDIM is its shape (2x8x64; nothing after the colon for a scalar).\n"
         "Element types: "
      << SupportedTypes()
      << " (one byte, 0 or 1).\n"
         "Every output is written as the raw bytes of its element type: to the FILE of its --output,\n"
         "else to DIR/NAME.bin (characters of NAME other than letters, digits, '.', '_', '-' become '_').\n";
}

// Parses argv into *command; "" when it is well formed, else why not.
std::string ParseCommand(int argc, char** argv, Command* command) {
  command->model = argv[1];
  command->library = argv[2];
  const std::string third = argv[3];
  if (third.rfind("--", 0) != 0) {
    // The older form: MODEL LIBRARY INPUT.bin OUTPUT.bin DIM...
    if (argc < 5) return "the older form needs MODEL LIBRARY INPUT.bin OUTPUT.bin DIM...";
    InputArg input;
    input.file = argv[3];
    for (int i = 5; i < argc; ++i) {
      int64_t dim = 0;
      if (!ParseDim(argv[i], &dim)) {
        return std::string("'") + argv[i] + "' is not a dimension (a whole number, 0 or more)";
      }
      input.shape.push_back(dim);
    }
    command->inputs.push_back(input);
    command->outputs[""] = argv[4];
    command->older_form = true;
    return "";
  }
  for (int i = 3; i < argc; ++i) {
    const std::string option = argv[i];
    if (option != "--input" && option != "--output" && option != "--output-dir") {
      return "unknown option '" + option + "' (expected --input, --output or --output-dir)";
    }
    if (i + 1 >= argc) return option + " needs a value";
    const std::string value = argv[++i];
    if (option == "--output-dir") {
      if (!command->output_dir.empty()) return "--output-dir is given twice";
      if (value.empty()) return "--output-dir needs a folder";
      command->output_dir = value;
      continue;
    }
    const size_t equals = value.find('=');
    if (equals == std::string::npos || equals == 0) {
      return option + " '" + value + "': expected NAME=FILE" + (option == "--input" ? ":DIMxDIM..." : "");
    }
    const std::string name = value.substr(0, equals);
    const std::string rest = value.substr(equals + 1);
    if (option == "--output") {
      if (rest.empty()) return "--output '" + value + "': expected NAME=FILE";
      if (!command->outputs.emplace(name, rest).second) return "output '" + name + "' is given twice";
      continue;
    }
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return "--input '" + value + "': expected NAME=FILE:DIMxDIM... (for example " + name + "=" +
             (rest.empty() ? "FILE" : rest) + ":2x8x64; nothing after the colon for a scalar)";
    }
    InputArg input;
    input.name = name;
    input.file = rest.substr(0, colon);
    const std::string shape = rest.substr(colon + 1);
    if (!ParseShape(shape, &input.shape)) {
      return "--input '" + value + "': '" + shape +
             "' is not a shape (dimensions, whole numbers, joined by 'x': 2x8x64; nothing for a scalar)";
    }
    for (const auto& other : command->inputs) {
      if (other.name == name) return "input '" + name + "' is given twice";
    }
    command->inputs.push_back(input);
  }
  if (command->inputs.empty()) return "no --input given";
  return "";
}

// NAME as a file name: characters other than letters, digits, '.', '_' and
// '-' become '_' ("." and ".." too).
std::string FileName(const std::string& name) {
  std::string file = name;
  for (char& c : file) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  if (file.empty() || file == "." || file == "..") file = std::string(file.size() + 1, '_');
  return file + ".bin";
}

// Element count of a shape; false when it overflows.
bool ElementCount(const std::vector<int64_t>& shape, size_t element_size, size_t* count, size_t* bytes) {
  size_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<size_t>(d), &n)) return false;
  }
  *count = n;
  return !__builtin_mul_overflow(n, element_size, bytes);
}

// "" when SHAPE fits what the model declares for PORT (its rank and its
// fixed dimensions), else why not. A model that declares no dimensions
// (a scalar, or no shape at all) is left to ONNX Runtime.
std::string CheckShape(const Port& port, const std::vector<int64_t>& shape) {
  if (port.shape.empty()) return "";
  bool fits = port.shape.size() == shape.size();
  for (size_t i = 0; fits && i < shape.size(); ++i) fits = port.shape[i] < 0 || port.shape[i] == shape[i];
  if (fits) return "";
  return "input '" + port.name + "' is declared with shape " + ShapeText(port.shape, port.dim_names) +
         ", but the shape given is " + ShapeText(shape);
}

// The input's tensor, read from its file; throws std::runtime_error naming
// the input when the file does not hold it.
Ort::Value ReadInput(const Port& port, const InputArg& arg, OrtAllocator* allocator) {
  const ElementType* type = FindElementType(port.type);
  size_t count = 0;
  size_t bytes = 0;
  if (!ElementCount(arg.shape, type->size, &count, &bytes)) {
    throw std::runtime_error("input '" + port.name + "': shape " + ShapeText(arg.shape) + " is too large");
  }
  std::error_code error;
  const auto file_size = std::filesystem::file_size(arg.file, error);
  if (error) {
    throw std::runtime_error("input '" + port.name + "': cannot read " + arg.file + ": " + error.message());
  }
  if (file_size != bytes) {
    throw std::runtime_error("input '" + port.name + "' (" + type->name + ", shape " + ShapeText(arg.shape) +
                             ") needs " + std::to_string(bytes) + " bytes (" + std::to_string(count) +
                             " values of " + std::to_string(type->size) + " bytes), but " + arg.file +
                             " has " + std::to_string(file_size) + " bytes");
  }
  Ort::Value tensor = Ort::Value::CreateTensor(allocator, arg.shape.data(), arg.shape.size(), port.type);
  if (bytes > 0) {
    std::ifstream in(arg.file, std::ios::binary);
    in.read(static_cast<char*>(tensor.GetTensorMutableRawData()), static_cast<std::streamsize>(bytes));
    if (!in) throw std::runtime_error("input '" + port.name + "': cannot read " + arg.file);
  }
  if (port.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL) {
    const auto* data = static_cast<const uint8_t*>(tensor.GetTensorRawData());
    for (size_t i = 0; i < count; ++i) {
      if (data[i] > 1) {
        throw std::runtime_error("input '" + port.name + "' is bool: every byte of " + arg.file +
                                 " must be 0 or 1, but byte " + std::to_string(i) + " is " +
                                 std::to_string(data[i]));
      }
    }
  }
  return tensor;
}

int Fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--info") {
    std::string error;
    OpLibrary library;
    if (!OpenLibrary(argv[2], &library, &error)) return Fail(error);
    std::cout << library.info << "\n";
    return 0;
  }
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    Usage(std::cout, argv[0]);
    return 0;
  }
  if (argc < 4) {
    Usage(std::cerr, argv[0]);
    return 2;
  }
  Command command;
  std::string error = ParseCommand(argc, argv, &command);
  if (!error.empty()) {
    std::cerr << "error: " << error << "\n";
    Usage(std::cerr, argv[0]);
    return 2;
  }
  try {
    OpLibrary library;
    std::map<std::string, int64_t> wanted;
    if (!OpenLibrary(command.library, &library, &error) ||
        !opbridge_host::ReadModelDomains(command.model, &wanted, &error)) {
      return Fail(error);
    }
    error = CheckDomainVersions(command.model, wanted, library);
    if (!error.empty()) return Fail(error);

    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "opbridge_run_model");
    Ort::SessionOptions options;
    options.RegisterCustomOpsLibrary(command.library.c_str());
    Ort::Session session(env, command.model.c_str(), options);

    Ort::AllocatorWithDefaultOptions allocator;
    std::vector<Port> inputs;
    std::vector<Port> outputs;
    for (size_t i = 0; i < session.GetInputCount(); ++i) {
      inputs.push_back(
          ReadPort(session.GetInputNameAllocated(i, allocator).get(), session.GetInputTypeInfo(i)));
    }
    for (size_t i = 0; i < session.GetOutputCount(); ++i) {
      outputs.push_back(
          ReadPort(session.GetOutputNameAllocated(i, allocator).get(), session.GetOutputTypeInfo(i)));
    }
    if (outputs.empty()) return Fail(command.model + " has no outputs");

    // The older form: the model's only input, and its first output.
    if (command.older_form) {
      if (inputs.size() != 1) {
        return Fail(command.model + " has " + std::to_string(inputs.size()) + " inputs (" + PortList(inputs) +
                    "), but the form INPUT.bin OUTPUT.bin DIM... feeds one: give each with --input "
                    "NAME=FILE:DIMxDIM");
      }
      command.inputs[0].name = inputs[0].name;
      command.outputs = {{outputs[0].name, command.outputs[""]}};
    }

    // Every input given once, by a name the model has, of a type run_model reads.
    std::vector<Ort::Value> feeds;
    std::vector<const char*> feed_names;
    for (const auto& arg : command.inputs) {
      const Port* port = nullptr;
      for (const auto& input : inputs) {
        if (input.name == arg.name) port = &input;
      }
      if (port == nullptr) {
        return Fail("the model has no input '" + arg.name + "'; its inputs are " + PortList(inputs));
      }
    }
    for (const auto& port : inputs) {
      const InputArg* arg = nullptr;
      for (const auto& given : command.inputs) {
        if (given.name == port.name) arg = &given;
      }
      if (arg == nullptr) {
        return Fail("missing input '" + port.name + "': the model declares " + port.Declared() +
                    "; give it with --input " + port.name + "=FILE:DIMxDIM");
      }
      if (!port.is_tensor)
        return Fail("input '" + port.name + "' is not a tensor; run_model feeds tensors only");
      if (FindElementType(port.type) == nullptr) {
        return Fail("input '" + port.name + "' has element type " + ElementTypeName(port.type) +
                    ", which run_model does not read; it reads raw bytes of " + SupportedTypes());
      }
      error = CheckShape(port, arg->shape);
      if (!error.empty()) return Fail(error);
      feeds.push_back(ReadInput(port, *arg, allocator));
      feed_names.push_back(port.name.c_str());
    }

    // Where each output goes: its --output file, else DIR/NAME.bin.
    for (const auto& [name, file] : command.outputs) {
      bool known = false;
      for (const auto& output : outputs) known = known || output.name == name;
      if (!known) return Fail("the model has no output '" + name + "'; its outputs are " + PortList(outputs));
    }
    std::vector<std::string> files;
    std::set<std::string> taken;
    std::vector<const char*> fetch_names;
    for (const auto& port : outputs) {
      std::string file;
      if (command.outputs.count(port.name) != 0) {
        file = command.outputs.at(port.name);
      } else if (command.older_form) {
        continue;  // the older form writes the first output only
      } else if (!command.output_dir.empty()) {
        file = (std::filesystem::path(command.output_dir) / FileName(port.name)).string();
      } else {
        return Fail("output '" + port.name +
                    "' has nowhere to go: give --output-dir DIR (it is written to DIR/" +
                    FileName(port.name) + ") or --output " + port.name + "=FILE");
      }
      if (!taken.insert(file).second) {
        return Fail("output '" + port.name + "' would overwrite " + file +
                    ", which another output is written to");
      }
      files.push_back(file);
      fetch_names.push_back(port.name.c_str());
    }
    if (!command.output_dir.empty()) std::filesystem::create_directories(command.output_dir);

    auto results = session.Run(Ort::RunOptions{nullptr}, feed_names.data(), feeds.data(), feeds.size(),
                               fetch_names.data(), fetch_names.size());

    // Every result is checked before any file is written.
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].IsTensor()) return Fail(std::string("output '") + fetch_names[i] + "' is not a tensor");
      const auto type = results[i].GetTensorTypeAndShapeInfo().GetElementType();
      if (FindElementType(type) == nullptr) {
        return Fail(std::string("output '") + fetch_names[i] + "' has element type " + ElementTypeName(type) +
                    ", which run_model does not write; it writes raw bytes of " + SupportedTypes());
      }
    }
    for (size_t i = 0; i < results.size(); ++i) {
      const auto info = results[i].GetTensorTypeAndShapeInfo();
      const ElementType* type = FindElementType(info.GetElementType());
      const size_t count = info.GetElementCount();
      std::ofstream out(files[i], std::ios::binary);
      if (count > 0) {
        out.write(static_cast<const char*>(results[i].GetTensorRawData()),
                  static_cast<std::streamsize>(count * type->size));
      }
      out.close();
      if (!out) return Fail(std::string("cannot write output '") + fetch_names[i] + "' to " + files[i]);
      if (command.older_form) {
        std::cout << "ok " << count << " values\n";
      } else {
        std::cout << "wrote " << fetch_names[i] << " (" << type->name << ", " << ShapeText(info.GetShape())
                  << ", " << count << " values) to " << files[i] << "\n";
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
}
