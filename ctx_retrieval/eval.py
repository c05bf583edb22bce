"""The evaluation under its earlier name, kept so ``from ctx_retrieval.eval import load_cookbook`` (the examples,
the notebooks, users' scripts) keeps working; the code lives in ``ctx_retrieval.evaluation``."""

from ctx_retrieval.evaluation import *  # noqa: F403
from ctx_retrieval.evaluation import __all__  # noqa: F401
