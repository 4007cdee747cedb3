"""The cluster credential and TLS files the connector and the worker take."""

from .errors import InvalidArgumentError


def security_files(cluster_token_file, tls_cert_file, tls_key_file, tls_ca_file,
                   role_credential_file=None) -> dict:
    """The core's `security` dict from the keyword arguments of that name.
    `role_credential_file` (from `sluice token derive`) stands in for the
    cluster token: it opens only its role's calls."""
    files = {"cluster_token_file": cluster_token_file, "tls_cert_file": tls_cert_file,
             "tls_key_file": tls_key_file, "tls_ca_file": tls_ca_file,
             "role_credential_file": role_credential_file}
    for key, value in files.items():
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"{key} must be a path (a string)")
    return {k: v for k, v in files.items() if v is not None}
