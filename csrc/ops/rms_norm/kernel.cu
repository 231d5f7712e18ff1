// rms_norm's CUDA kernels, on the normalization kernels shared with
// add_rms_norm (opbridge/cuda_norms.cuh).
#include "opbridge/cuda.h"
#include "opbridge/cuda_norms.cuh"
#include "ops/rms_norm/spec.h"

OPBRIDGE_REGISTER_CUDA_NORM_KERNELS(opbridge::kRmsNormSpec, opbridge::cuda::norms::Norm::kRms,
                                    opbridge::NormResidual::kNone)
