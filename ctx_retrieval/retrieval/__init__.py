"""Finding chunks: BM25 and dense search, their fusion, reranking, and the embedders behind them.

- ``bm25``: BM25 over numpy arrays; ``dense``: exact numpy search and Chroma collection setup.
- ``fusion``: reciprocal rank fusion; ``filters``: metadata filters on the BM25 side.
- ``store``: a contextual hybrid index on disk; ``rerank``: Claude as reranker.
- ``embeddings``: the offline MiniLM embedder and its cache; ``chroma``: Chroma glue.
- ``layout``: context + chunk as one or several vectors; ``late``: late chunking.
"""
