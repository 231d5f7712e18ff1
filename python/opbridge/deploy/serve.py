"""Serving an ONNX model with opbridge nodes on a Ray cluster (Ray Serve).

    import ray
    from ray import serve
    from opbridge.deploy.serve import deployment

    ray.init()                                    # or connect to a running cluster
    handle = serve.run(deployment("model.onnx", num_replicas=4, cpus_per_replica=2))
    outputs = handle.remote({"x": x}).result()    # dict of output name -> numpy array

Each replica is a Ray actor that reserves ``cpus_per_replica`` CPUs and opens
one :func:`opbridge.runtimes.onnxruntime.InferenceSession` (the model's custom-op libraries
registered) with as many intra-op threads, so replicas on one node do not
oversubscribe its cores. A request is a dict of input name -> array (or one
array for a single-input model); the answer is a dict of output name ->
array. Ray is imported only when a deployment is made.
"""

from __future__ import annotations

import os
from typing import Any


class OpbridgeModel:
    """One replica: a session over the model, run per request."""

    def __init__(self, model: str | bytes, threads: int):
        from opbridge.runtimes.onnxruntime import InferenceSession

        self.session = InferenceSession(model, threads=threads)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.threads = threads

    def info(self) -> dict:
        """The replica's process, thread count and the model's inputs and outputs."""
        return {
            "pid": os.getpid(),
            "threads": self.threads,
            "inputs": self.inputs,
            "outputs": self.outputs,
        }

    def __call__(self, request: Any) -> dict:
        import numpy as np

        if not isinstance(request, dict):
            if len(self.inputs) != 1:
                raise ValueError(
                    f"opbridge.deploy.serve: the model takes inputs {self.inputs}; send a dict of "
                    "them"
                )
            request = {self.inputs[0]: request}
        missing = [n for n in self.inputs if n not in request]
        if missing:
            raise ValueError(
                f"opbridge.deploy.serve: request lacks inputs {missing} (the model takes "
                f"{self.inputs})"
            )
        feeds = {n: np.asarray(request[n]) for n in self.inputs}
        return dict(zip(self.outputs, self.session.run(self.outputs, feeds), strict=True))


def deployment(
    model: str | os.PathLike | bytes,
    *,
    num_replicas: int = 1,
    cpus_per_replica: int = 1,
    name: str = "opbridge_model",
    max_ongoing_requests: int = 8,
):
    """A Ray Serve application (``serve.run`` it) serving ``model`` (a path,
    or the serialized model) with ``num_replicas`` replicas of
    ``cpus_per_replica`` CPUs and intra-op threads each."""
    from ray import serve

    if cpus_per_replica < 1 or num_replicas < 1:
        raise ValueError(
            "opbridge.deploy.serve.deployment: num_replicas and cpus_per_replica must be >= 1, got "
            f"{num_replicas} and {cpus_per_replica}"
        )
    if isinstance(model, os.PathLike | str):
        model = os.fspath(model)
        if not os.path.isfile(model):
            raise FileNotFoundError(f"opbridge.deploy.serve.deployment: no ONNX model at {model}")
    replica = serve.deployment(
        OpbridgeModel,
        name=name,
        num_replicas=num_replicas,
        max_ongoing_requests=max_ongoing_requests,
        ray_actor_options={"num_cpus": cpus_per_replica},
    )
    return replica.bind(model, cpus_per_replica)
