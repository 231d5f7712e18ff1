// layer_norm's CUDA kernels, on the normalization kernels shared with
// add_layer_norm (opbridge/cuda_norms.cuh).
#include "opbridge/cuda.h"
#include "opbridge/cuda_norms.cuh"
#include "ops/layer_norm/spec.h"

OPBRIDGE_REGISTER_CUDA_NORM_KERNELS(opbridge::kLayerNormSpec, opbridge::cuda::norms::Norm::kLayer,
                                    opbridge::NormResidual::kNone)
