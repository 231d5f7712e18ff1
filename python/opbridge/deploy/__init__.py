"""Deployment: int8 quantization (:mod:`~opbridge.deploy.quantize`), a Triton
model repository (:mod:`~opbridge.deploy.triton`) and Ray Serve replicas
(:mod:`~opbridge.deploy.serve`) for models with opbridge's operators."""
