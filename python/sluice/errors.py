"""Typed exceptions for sluice errors, one per status code.

Every error raised by sluice derives from SluiceError; where a standard
Python exception has the same meaning the class derives from it too, so
`except TimeoutError` or `except ValueError` work as expected.
"""

import functools

from . import _sluice


class SluiceError(Exception):
    """Base of every sluice error; `code` is the status code's name."""

    code = "UNKNOWN"


class CancelledError(SluiceError):
    code = "CANCELLED"


class InvalidArgumentError(SluiceError, ValueError):
    code = "INVALID_ARGUMENT"


class NotFoundError(SluiceError, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(SluiceError):
    code = "ALREADY_EXISTS"


class ResourceExhaustedError(SluiceError):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(SluiceError):
    code = "FAILED_PRECONDITION"


class UnavailableError(SluiceError, ConnectionError):
    code = "UNAVAILABLE"


class DeadlineExceededError(SluiceError, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class DataLossError(SluiceError):
    code = "DATA_LOSS"


class PermissionDeniedError(SluiceError, PermissionError):
    code = "PERMISSION_DENIED"


class UnimplementedError(SluiceError, NotImplementedError):
    """A peer answered UNIMPLEMENTED (e.g. a device kind this build lacks):
    the typed exception for that status code, not a placeholder."""

    code = "UNIMPLEMENTED"


class InternalError(SluiceError):
    code = "INTERNAL"


class UnauthenticatedError(SluiceError, PermissionError):
    """No cluster credential, or a wrong one (see `cluster_token_file`)."""

    code = "UNAUTHENTICATED"


_BY_CODE = {
    cls.code: cls
    for cls in (
        CancelledError,
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        ResourceExhaustedError,
        FailedPreconditionError,
        UnavailableError,
        DeadlineExceededError,
        DataLossError,
        PermissionDeniedError,
        UnimplementedError,
        InternalError,
        UnauthenticatedError,
    )
}


def from_status(code_name, message):
    """The exception for a status code name and message."""
    return _BY_CODE.get(code_name, SluiceError)(message)


def translated(fn):
    """Re-raises the core's StatusError as the matching typed exception."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _sluice.StatusError as e:
            _, name, message = e.args
            raise from_status(name, message) from None

    return wrapper
