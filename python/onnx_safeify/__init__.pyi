import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Union


class _SerializableModel(Protocol):
    def SerializeToString(self) -> bytes: ...

_PathLike = Union[str, "os.PathLike[str]"]
Model = Union[_PathLike, bytes, bytearray, memoryview, _SerializableModel]

__version__: str

class Error(ValueError):
    """An onnx-safeify error, with the message the command prints after ``error: ``: one line,
    except for rule files (a first line that counts the errors, then each with
    ``file:line:col`` and a snippet)."""

class Result:
    @property
    def model_bytes(self) -> bytes: ...
    @property
    def report(self) -> Dict[str, Any]: ...
    @property
    def model(self) -> Any: ...  # onnx.ModelProto
    @property
    def slowdown(self) -> Optional[float]: ...
    def save(self, path: _PathLike) -> List[str]: ...

def compile(
    model: Model,
    target: _PathLike,
    *,
    rules: Union[_PathLike, Iterable[_PathLike]] = ...,
    dims: Optional[Mapping[str, int]] = ...,
    allow_unsafe: bool = ...,
    strict: bool = ...,
    nchwc_block: Optional[int] = ...,
) -> Result: ...
def check(
    model: Model,
    target: _PathLike,
    *,
    rules: Union[_PathLike, Iterable[_PathLike]] = ...,
    dims: Optional[Mapping[str, int]] = ...,
) -> List[Dict[str, Any]]: ...
def targets() -> List[str]: ...
def verify(
    original: Union[Model, Result],
    rewritten: Union[Model, Result],
    *,
    inputs: Optional[_PathLike] = ...,
    expected: Optional[_PathLike] = ...,
    dims: Optional[Mapping[str, int]] = ...,
    rtol: float = ...,
    atol: float = ...,
    runs: int = ...,
    seed: int = ...,
    ort_library: Optional[_PathLike] = ...,
) -> Dict[str, Any]: ...
