"""The cluster credential and TLS files the connector and the worker take."""

from .errors import InvalidArgumentError


def security_files(cluster_token_file, tls_cert_file, tls_key_file, tls_ca_file) -> dict:
    """The core's `security` dict from the keyword arguments of that name."""
    files = {"cluster_token_file": cluster_token_file, "tls_cert_file": tls_cert_file,
             "tls_key_file": tls_key_file, "tls_ca_file": tls_ca_file}
    for key, value in files.items():
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"{key} must be a path (a string)")
    return {k: v for k, v in files.items() if v is not None}
