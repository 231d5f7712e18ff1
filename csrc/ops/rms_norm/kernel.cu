// rms_norm's CUDA kernels, on the normalization kernels shared with
// add_rms_norm (ops/shared/cuda_norms.cuh).
#include "opbridge/cuda.h"
#include "ops/rms_norm/spec.h"
#include "ops/shared/cuda_norms.cuh"

OPBRIDGE_REGISTER_CUDA_NORM_KERNELS(opbridge::kRmsNormSpec, opbridge::cuda::norms::Norm::kRms,
                                    opbridge::NormResidual::kNone)
