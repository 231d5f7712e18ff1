// A second Python entry point, PyInit_faulty_twin, so that a copy of this
// library's extension module loads as another module ("faulty_twin") of the
// same torch namespace: the duplicate-library case of the tests, from one
// build. Weak, so that the ONNX Runtime and OpenVINO libraries (which have no
// PyInit_faulty_ops_torch) link too.
struct _object;

extern "C" _object* PyInit_faulty_ops_torch() __attribute__((weak));

extern "C" __attribute__((visibility("default"))) _object* PyInit_faulty_twin() {
  return PyInit_faulty_ops_torch != nullptr ? PyInit_faulty_ops_torch() : nullptr;
}
