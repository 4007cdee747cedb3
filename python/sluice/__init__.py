"""sluice: disaggregated diffusion serving (Encode -> Denoise -> Decode).

`sluice.diffusion` holds the stage-facing connector; errors are typed
(`sluice.NotFoundError`, `sluice.ResourceExhaustedError`, ...).
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

from .worker import StageOutput, StageWorker

__all__ = [
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
