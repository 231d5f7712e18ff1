// add_rms_norm's CUDA kernels, on the normalization kernels shared with
// rms_norm (ops/shared/cuda_norms.cuh): the add is fused into the first pass
// over each row, its gradient into the last pass of the backward.
#include "opbridge/cuda.h"
#include "ops/add_rms_norm/spec.h"
#include "ops/shared/cuda_norms.cuh"

OPBRIDGE_REGISTER_CUDA_NORM_KERNELS(opbridge::kAddRmsNormSpec, opbridge::cuda::norms::Norm::kRms,
                                    opbridge::NormResidual::kAdded)
