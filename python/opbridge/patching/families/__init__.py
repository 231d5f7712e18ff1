"""One module per layer family with a fused forward (see :mod:`opbridge.patching.fused`)."""
