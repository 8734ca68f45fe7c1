# The extension module (src/python.rs); use the functions of `onnx_safeify` instead.
from typing import List, Optional, Sequence, Tuple

__version__: str

class Error(ValueError): ...

class Compiled:
    @property
    def report_json(self) -> str: ...
    def model_bytes(self) -> bytes: ...
    def save(self, path: str) -> List[str]: ...

def compile(
    path: Optional[str],
    data: Optional[bytes],
    label: str,
    target: str,
    rules: Sequence[str],
    dims: Sequence[Tuple[str, int]],
    allow_unsafe: bool,
    strict: bool = ...,
    nchwc_block: Optional[int] = ...,
) -> Compiled: ...
def check(
    path: Optional[str],
    data: Optional[bytes],
    label: str,
    target: str,
    rules: Sequence[str],
    dims: Sequence[Tuple[str, int]],
) -> str: ...
def targets() -> List[str]: ...
def verify(args: Sequence[str]) -> str: ...
def run_cli(argv: Sequence[str]) -> int: ...
