"""Every error of the package round-trips through pickle with its fields (multiprocessing and Ray move errors
between processes; an error that cannot be unpickled hangs ``IngestionPipeline.run(num_workers=N)``)."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

import ctx_retrieval.errors as errors
from ctx_retrieval.usage import RunReport


def _sample(name: str, annotation: Any) -> Any:
    text = str(annotation)
    if name == "report":
        return RunReport(provider="anthropic", model="m", prompt_version="v", chunks=3, generated=2)
    if "bool" in text:
        return True
    if "int" in text:
        return 429
    if "float" in text:
        return 1.25
    return f"{name}-value"


def _instance(cls: type[errors.CtxRetrievalError]) -> errors.CtxRetrievalError:
    kwargs = {name: _sample(name, p.annotation) for name, p in inspect.signature(cls.__init__).parameters.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY}  # annotations are strings (postponed evaluation)
    return cls(f"{cls.__name__} happened: do this", **kwargs)


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_round_trips_through_pickle_with_its_fields(name: str) -> None:
    cls = getattr(errors, name)
    error = _instance(cls)
    error.report = error.report or RunReport(provider="p", model="m", prompt_version="v")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and str(back) == str(error) and back.args == error.args
    fields = {k: v for k, v in vars(error).items() if k != "report"}
    assert {k: v for k, v in vars(back).items() if k != "report"} == fields
    assert back.report is not None and back.report.to_dict() == error.report.to_dict()
    if isinstance(error, ImportError):
        assert (back.name, back.path) == (error.name, error.path)
    assert isinstance(back, cls.__mro__[1])  # still the builtin callers catch
