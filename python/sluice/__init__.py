"""sluice: disaggregated diffusion serving (Encode -> Denoise -> Decode).

`sluice.diffusion` holds the stage-facing connector; `sluice.TransferEngine`
and `sluice.Store` the engine and the store client beneath it, on DLPack
tensors (host or device; `sluice.SimTensor` is a simulated device). Errors
are typed (`sluice.NotFoundError`, `sluice.ResourceExhaustedError`, ...).
"""

from .errors import (
    AlreadyExistsError,
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    UnauthenticatedError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    SluiceError,
    UnavailableError,
    UnimplementedError,
)

from .batching import StepBatcher
from .engine import Store, TransferEngine
from .tensors import SimTensor
from .worker import StageOutput, StageWorker

__all__ = [
    "SimTensor",
    "StepBatcher",
    "Store",
    "TransferEngine",
    "StageOutput",
    "StageWorker",
    "AlreadyExistsError",
    "CancelledError",
    "DataLossError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InternalError",
    "UnauthenticatedError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "SluiceError",
    "UnavailableError",
    "UnimplementedError",
]
