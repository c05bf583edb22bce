"""LangChain integration for ctx_retrieval (``ContextualDocumentTransformer`` and an ensemble retriever).

Not implemented yet: this package holds the place of the LangChain adapter in the wheel. Use the core,
``ctx_retrieval.ContextGenerator``, directly until it lands.
"""

__all__: list[str] = []
