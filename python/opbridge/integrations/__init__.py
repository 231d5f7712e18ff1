"""Adopting opbridge in models of other libraries: Hugging Face transformers
(:mod:`~opbridge.integrations.hf`) and the adoption comparison of a patched
model against the unpatched one (:mod:`~opbridge.integrations.adoption`)."""
