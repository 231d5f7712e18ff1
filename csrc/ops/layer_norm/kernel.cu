// layer_norm's CUDA kernels, on the normalization kernels shared with
// add_layer_norm (ops/shared/cuda_norms.cuh).
#include "opbridge/cuda.h"
#include "ops/layer_norm/spec.h"
#include "ops/shared/cuda_norms.cuh"

OPBRIDGE_REGISTER_CUDA_NORM_KERNELS(opbridge::kLayerNormSpec, opbridge::cuda::norms::Norm::kLayer,
                                    opbridge::NormResidual::kNone)
