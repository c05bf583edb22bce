"""LlamaIndex integration for ctx_retrieval (``ContextualNodeTransform`` and hybrid retrieval).

Not implemented yet: this package holds the place of the LlamaIndex adapter in the wheel. Use the core,
``ctx_retrieval.ContextGenerator``, directly until it lands.
"""

__all__: list[str] = []
