"""Typed errors raised by ctx_retrieval.

Every error subclasses a builtin that callers already catch, carries structured attributes, and its message
names the setting or call that fixes it::

    CtxRetrievalError
    ├── ConfigurationError (ValueError)        a setting is wrong: the message names it
    │   ├── UnknownModelError                  no price or limits known for a model
    │   │   └── RetiredModelError              the model was retired: the message names its replacement
    │   ├── UnsupportedSettingError            a request setting the model is documented to reject
    │   └── SharedStoreError                   a single-process store (local Chroma) already open in another
    │                                          process: the message names the server to use instead
    ├── InvalidInputError (ValueError)         a document or chunk cannot be contextualized as given
    │   ├── ChunkNotInDocumentError
    │   ├── DuplicateChunkIdError
    │   ├── InvalidTextError                   not valid UTF-8 text (lone surrogates, NUL bytes)
    │   └── ChunkTooLargeError
    ├── MissingDependencyError (ImportError)   an optional extra is not installed
    ├── CacheError (RuntimeError)              a cache file cannot be used: the message names it and the fix
    ├── SearchIndexError (RuntimeError)        a BM25 index folder cannot be opened or written (built with
    │                                          another tokenizer, another format, a writer that never lets go)
    ├── ProviderError (RuntimeError)           the LLM provider refused or failed
    │   ├── ProviderAuthenticationError        the key is missing, malformed or rejected
    │   ├── ProviderPermissionError            the key may not use this model or resource (HTTP 403)
    │   ├── ProviderBillingError               billing problem (402) or the monthly spend limit (429)
    │   ├── ProviderRequestError               a request was refused (bad model, prompt too long, ...)
    │   └── ProviderUnavailableError           nothing answered at the server's address for too long
    └── ContextGenerationError (RuntimeError)  a run ended with chunks that have no context
        └── BudgetExceededError                the run stopped at its dollar budget

``ContextGenerationError`` carries the run report: every chunk is accounted for as done, failed or not
attempted, and ``ContextGenerator.retry_failed(error.report)`` retries exactly the chunks without a context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctx_retrieval.contextualize.results import ContextRun
    from ctx_retrieval.usage import RunReport

__all__ = [
    "BudgetExceededError",
    "CacheError",
    "ChunkNotInDocumentError",
    "ChunkTooLargeError",
    "ConfigurationError",
    "ContextGenerationError",
    "CtxRetrievalError",
    "DuplicateChunkIdError",
    "InvalidInputError",
    "InvalidTextError",
    "MissingDependencyError",
    "ProviderAuthenticationError",
    "ProviderBillingError",
    "ProviderError",
    "ProviderPermissionError",
    "ProviderRequestError",
    "ProviderUnavailableError",
    "RetiredModelError",
    "SearchIndexError",
    "SharedStoreError",
    "UnknownModelError",
    "UnsupportedSettingError",
]


class CtxRetrievalError(Exception):
    """Root of every error this package raises on purpose.

    ``report`` is set when the error ends a run: what was done, failed or not attempted; ``run`` then holds every
    result of that run, so contexts already paid for are never lost with the error (even those the cache could not
    store).
    """

    report: RunReport | None = None
    run: ContextRun | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Round-trips through ``pickle`` with every field: multiprocessing (LlamaIndex's ``num_workers``) and Ray
        move errors between processes, and ``Exception``'s own pickling calls ``cls(*args)``, which fails for
        keyword-only fields (and a failed unpickle kills multiprocessing's result thread: the pipeline hangs)."""
        state = dict(self.__dict__)
        if isinstance(self, ImportError):  # ImportError keeps name and path outside __dict__
            state.update(name=self.name, path=self.path)
        return _rebuild, (type(self), self.args, state)


def _rebuild(cls: type[CtxRetrievalError], args: tuple[Any, ...], state: dict[str, Any]) -> CtxRetrievalError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    for name, value in state.items():
        setattr(error, name, value)
    return error


class ConfigurationError(CtxRetrievalError, ValueError):
    """A setting is invalid; ``setting`` names it."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class UnknownModelError(ConfigurationError):
    """The model is not in the model table, so its price or limits are unknown."""

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message, setting="model")
        self.model = model


class RetiredModelError(UnknownModelError):
    """The model was retired and every request to it fails; ``replacement`` is the model to use instead."""

    def __init__(self, message: str, *, model: str, replacement: str, retired_on: str | None) -> None:
        super().__init__(message, model=model)
        self.replacement = replacement
        self.retired_on = retired_on


class UnsupportedSettingError(ConfigurationError):
    """A request setting (``extra_body`` field) the model is documented to reject with HTTP 400."""

    def __init__(self, message: str, *, setting: str, model: str) -> None:
        super().__init__(message, setting=setting)
        self.model = model


class SharedStoreError(ConfigurationError):
    """A vector store that keeps its vectors in the process that opened it (Chroma's ``PersistentClient``) is
    already open in another live process, which would never see this one's new vectors (or this one its). ``path``
    is the store's folder, ``other`` the other process (a worker id)."""

    def __init__(self, message: str, *, path: str, other: str) -> None:
        super().__init__(message, setting="vector_store")
        self.path = path
        self.other = other


class InvalidInputError(CtxRetrievalError, ValueError):
    """A document or chunk cannot be contextualized as given."""

    def __init__(self, message: str, *, document_id: str | None = None, chunk_id: str | None = None) -> None:
        super().__init__(message)
        self.document_id = document_id
        self.chunk_id = chunk_id


class ChunkNotInDocumentError(InvalidInputError):
    """A chunk's text does not occur in the document it was given with."""


class DuplicateChunkIdError(InvalidInputError):
    """Two chunks of one document share an id, so their results could not be told apart."""


class InvalidTextError(InvalidInputError):
    """Text that cannot be sent as UTF-8 (lone surrogates from bad decoding, NUL bytes from binary files)."""


class ChunkTooLargeError(InvalidInputError):
    """A chunk alone does not fit the model's context window."""


class MissingDependencyError(CtxRetrievalError, ImportError):
    """An optional dependency is missing; ``extra`` is the pip extra that installs it."""

    def __init__(self, message: str, *, extra: str, module: str) -> None:
        super().__init__(message, name=module)
        self.extra = extra
        self.module = module


class CacheError(CtxRetrievalError, RuntimeError):
    """A cache cannot be used: a file truncated, garbage, written by something else, unreadable or on a full disk;
    a database server that does not answer. ``path`` names it (a URL without its password); ``transient`` is True
    when trying again later may succeed (the server is restarting, the file is locked)."""

    def __init__(self, message: str, *, path: str, transient: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.transient = transient


class SearchIndexError(CtxRetrievalError, RuntimeError):
    """A search index (``BM25Store``) cannot be used: another format or tokenizer than asked for, files of something
    else in its folder, or another process's writer that holds it past the timeout. ``path`` names the folder."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class ProviderError(CtxRetrievalError, RuntimeError):
    """The provider failed in a way that retrying will not fix. ``error_type`` is the server's own name for the
    error where it gave one (``invalid_request_error``, ``exceed_context_size_error``...)."""

    def __init__(self, message: str, *, provider: str, status_code: int | None = None,
                 error_type: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.error_type = error_type


class ProviderAuthenticationError(ProviderError):
    """The API key is missing, malformed or rejected."""


class ProviderPermissionError(ProviderError):
    """The key is valid but may not use the requested model or resource (HTTP 403)."""


class ProviderBillingError(ProviderError):
    """The account cannot be billed (HTTP 402) or reached its monthly spend limit (HTTP 429 with
    ``error.details.error_code == "enforced_spend_limit_reached"``): retrying does not help."""


class ProviderRequestError(ProviderError):
    """The provider refused a request (unknown model, prompt too long, invalid request)."""


class ProviderUnavailableError(ProviderError):
    """Nothing answered at the server's address for longer than ``RetryPolicy.max_outage_s``."""


class ContextGenerationError(CtxRetrievalError, RuntimeError):
    """A run ended with chunks that have no context; ``report`` lists them (``report.failed``)."""

    report: RunReport

    def __init__(self, message: str, *, report: RunReport) -> None:
        super().__init__(message)
        self.report = report


class BudgetExceededError(ContextGenerationError):
    """The run stopped before spending more than ``budget_usd``; finished contexts are cached."""

    def __init__(self, message: str, *, report: RunReport, budget_usd: float, spent_usd: float) -> None:
        super().__init__(message, report=report)
        self.budget_usd = budget_usd
        self.spent_usd = spent_usd
