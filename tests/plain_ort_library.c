/* A plain ONNX Runtime custom-op library, written against ONNX Runtime's C API
 * only (no opbridge SDK): the kind of library a user registers in their own
 * SessionOptions. Domain "test.plain", one op:
 *
 *   Negate(x: float tensor) -> y: float tensor of x's shape, y = -x (CPU).
 *
 * The tests build it with the system C compiler (tests/plain_ort_library.py).
 * Every error is returned as an OrtStatus; nothing aborts the process. */

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "onnxruntime_c_api.h"

#define PLAIN_DOMAIN "test.plain"
#define PLAIN_OP "Negate"

/* The kernel's state: the API table ONNX Runtime handed to CreateKernelV2. */
typedef struct NegateKernel {
  const OrtApi* api;
} NegateKernel;

/* ---- schema callbacks ---- */

static const char* ORT_API_CALL negate_name(const OrtCustomOp* op) {
  (void)op;
  return PLAIN_OP;
}

static const char* ORT_API_CALL negate_provider(const OrtCustomOp* op) {
  (void)op;
  return NULL; /* NULL: the CPU execution provider */
}

static ONNXTensorElementDataType ORT_API_CALL negate_float_type(const OrtCustomOp* op, size_t index) {
  (void)op;
  (void)index;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}

static size_t ORT_API_CALL negate_one(const OrtCustomOp* op) {
  (void)op;
  return 1;
}

static OrtCustomOpInputOutputCharacteristic ORT_API_CALL negate_required(const OrtCustomOp* op,
                                                                         size_t index) {
  (void)op;
  (void)index;
  return INPUT_OUTPUT_REQUIRED;
}

static OrtMemType ORT_API_CALL negate_memory_type(const OrtCustomOp* op, size_t index) {
  (void)op;
  (void)index;
  return OrtMemTypeDefault;
}

/* Variadic arity and homogeneity: asked only of a variadic input or output,
 * which Negate has none of; answered anyway with the neutral values. */
static int ORT_API_CALL negate_min_arity(const OrtCustomOp* op) {
  (void)op;
  return 1;
}

static int ORT_API_CALL negate_homogeneous(const OrtCustomOp* op) {
  (void)op;
  return 1;
}

static int ORT_API_CALL negate_start_version(const OrtCustomOp* op) {
  (void)op;
  return 1;
}

static int ORT_API_CALL negate_end_version(const OrtCustomOp* op) {
  (void)op;
  return INT_MAX;
}

/* ---- kernel callbacks ---- */

static OrtStatusPtr ORT_API_CALL negate_create_kernel(const OrtCustomOp* op, const OrtApi* api,
                                                      const OrtKernelInfo* info, void** kernel) {
  (void)op;
  (void)info;
  if (kernel == NULL) return api->CreateStatus(ORT_INVALID_ARGUMENT, "Negate: no place for the kernel");
  *kernel = NULL;
  NegateKernel* state = (NegateKernel*)malloc(sizeof(NegateKernel));
  if (state == NULL) return api->CreateStatus(ORT_FAIL, "Negate: out of memory creating the kernel");
  state->api = api;
  *kernel = state;
  return NULL;
}

static void ORT_API_CALL negate_destroy_kernel(void* kernel) { free(kernel); }

/* Returns the status of `call` from the enclosing function (after `cleanup`)
 * when it is an error. */
#define PLAIN_CHECK(call, cleanup)     \
  do {                                 \
    OrtStatus* plain_status_ = (call); \
    if (plain_status_ != NULL) {       \
      cleanup;                         \
      return plain_status_;            \
    }                                  \
  } while (0)

static OrtStatusPtr ORT_API_CALL negate_compute(void* kernel, OrtKernelContext* context) {
  const OrtApi* api = ((NegateKernel*)kernel)->api;
  const OrtValue* input = NULL;
  OrtValue* output = NULL;
  OrtTensorTypeAndShapeInfo* info = NULL;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t rank = 0;
  size_t count = 0;
  int64_t* dims = NULL;
  void* x_data = NULL;
  void* y_data = NULL;

  PLAIN_CHECK(api->KernelContext_GetInput(context, 0, &input), (void)0);
  if (input == NULL) return api->CreateStatus(ORT_INVALID_ARGUMENT, "Negate: input 0 is missing");
  PLAIN_CHECK(api->GetTensorTypeAndShape(input, &info), (void)0);
  PLAIN_CHECK(api->GetTensorElementType(info, &type), api->ReleaseTensorTypeAndShapeInfo(info));
  if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
    api->ReleaseTensorTypeAndShapeInfo(info);
    return api->CreateStatus(ORT_INVALID_ARGUMENT, "Negate: the input must be a float32 tensor");
  }
  PLAIN_CHECK(api->GetDimensionsCount(info, &rank), api->ReleaseTensorTypeAndShapeInfo(info));
  PLAIN_CHECK(api->GetTensorShapeElementCount(info, &count), api->ReleaseTensorTypeAndShapeInfo(info));
  /* One spare element: a scalar (rank 0) still gets a valid pointer. */
  dims = (int64_t*)calloc(rank + 1, sizeof(int64_t));
  if (dims == NULL) {
    api->ReleaseTensorTypeAndShapeInfo(info);
    return api->CreateStatus(ORT_FAIL, "Negate: out of memory reading the input's shape");
  }
  PLAIN_CHECK(api->GetDimensions(info, dims, rank), {
    free(dims);
    api->ReleaseTensorTypeAndShapeInfo(info);
  });
  api->ReleaseTensorTypeAndShapeInfo(info);

  PLAIN_CHECK(api->KernelContext_GetOutput(context, 0, dims, rank, &output), free(dims));
  free(dims);
  if (output == NULL) return api->CreateStatus(ORT_FAIL, "Negate: no output tensor was allocated");
  if (count == 0) return NULL;

  /* GetTensorMutableData takes a non-const OrtValue; the input is only read. */
  PLAIN_CHECK(api->GetTensorMutableData((OrtValue*)input, &x_data), (void)0);
  PLAIN_CHECK(api->GetTensorMutableData(output, &y_data), (void)0);
  if (x_data == NULL || y_data == NULL) return api->CreateStatus(ORT_FAIL, "Negate: a tensor has no data");

  const float* x = (const float*)x_data;
  float* y = (float*)y_data;
  for (size_t i = 0; i < count; ++i) y[i] = -x[i];
  return NULL;
}

/* ---- the op and its domain (static: alive for the process) ---- */

static OrtCustomOp negate_op; /* zero-initialized; filled once by fill_negate_op */
static OrtCustomOpDomain* plain_domain = NULL;
static pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;

static void fill_negate_op(void) {
  negate_op.version = ORT_API_VERSION;
  negate_op.CreateKernel = NULL; /* the V2 callbacks below are used (version > 15, no KernelCompute) */
  negate_op.GetName = negate_name;
  negate_op.GetExecutionProviderType = negate_provider;
  negate_op.GetInputType = negate_float_type;
  negate_op.GetInputTypeCount = negate_one;
  negate_op.GetOutputType = negate_float_type;
  negate_op.GetOutputTypeCount = negate_one;
  negate_op.KernelCompute = NULL;
  negate_op.KernelDestroy = negate_destroy_kernel;
  negate_op.GetInputCharacteristic = negate_required;
  negate_op.GetOutputCharacteristic = negate_required;
  negate_op.GetInputMemoryType = negate_memory_type;
  negate_op.GetVariadicInputMinArity = negate_min_arity;
  negate_op.GetVariadicInputHomogeneity = negate_homogeneous;
  negate_op.GetVariadicOutputMinArity = negate_min_arity;
  negate_op.GetVariadicOutputHomogeneity = negate_homogeneous;
  negate_op.CreateKernelV2 = negate_create_kernel;
  negate_op.KernelComputeV2 = negate_compute;
  /* Optional, left NULL: ONNX Runtime then gives the output the element type
   * GetOutputType declares. A shape function could not tell an input of
   * unknown rank from a scalar (both read as rank 0) and would call the
   * output of the first a scalar. */
  negate_op.InferOutputShapeFn = NULL;
  negate_op.GetStartVersion = negate_start_version;
  negate_op.GetEndVersion = negate_end_version;
  /* Optional, left NULL: no output reuses or aliases an input. */
  negate_op.GetMayInplace = NULL;
  negate_op.ReleaseMayInplace = NULL;
  negate_op.GetAliasMap = NULL;
  negate_op.ReleaseAliasMap = NULL;
}

/* The domain, made on the first call and kept for the process; later calls
 * (another SessionOptions) add the same domain object. */
static OrtStatus* plain_domain_once(const OrtApi* api, OrtCustomOpDomain** out) {
  OrtStatus* status = NULL;
  OrtCustomOpDomain* domain = NULL;
  *out = NULL;
  if (pthread_mutex_lock(&plain_lock) != 0) {
    return api->CreateStatus(ORT_FAIL, "test.plain: could not take the library's lock");
  }
  if (plain_domain == NULL) {
    fill_negate_op();
    status = api->CreateCustomOpDomain(PLAIN_DOMAIN, &domain);
    if (status == NULL) {
      status = api->CustomOpDomain_Add(domain, &negate_op);
      if (status == NULL) {
        plain_domain = domain;
      } else {
        api->ReleaseCustomOpDomain(domain);
      }
    }
  }
  *out = plain_domain;
  pthread_mutex_unlock(&plain_lock);
  return status;
}

ORT_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  if (api_base == NULL) return NULL; /* no API to report an error with; nothing registered */
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == NULL) {
    /* A runtime older than these headers. CreateStatus is the first entry of
     * every version of the API table, so version 1's can report it. */
    const OrtApi* oldest = api_base->GetApi(1);
    if (oldest == NULL) return NULL;
    return oldest->CreateStatus(ORT_FAIL,
                                "test.plain: this ONNX Runtime is older than the library's headers");
  }
  if (options == NULL) return api->CreateStatus(ORT_INVALID_ARGUMENT, "test.plain: no session options");
  OrtCustomOpDomain* domain = NULL;
  OrtStatus* status = plain_domain_once(api, &domain);
  if (status != NULL) return status;
  return api->AddCustomOpDomain(options, domain);
}
