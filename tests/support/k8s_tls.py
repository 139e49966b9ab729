"""A self-signed serving certificate for the simulated API server on 127.0.0.1.

``kubectl`` (client-go's ``clientcmd``) sends a kubeconfig user's credentials only over
TLS: against an ``http://`` server it sends no bearer token at all, and a server that
requires one (as the fake does) answers 401. So the fake serves HTTPS when asked, with this
certificate (an EC P-256 key, valid for the IP address 127.0.0.1 and for ``localhost``), and
its kubeconfig carries the certificate as ``certificate-authority-data``, as a cluster's does.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@functools.cache
def certificate() -> tuple[Path, Path]:
    """(certificate PEM, private key PEM) files, made once per process."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = Path(tempfile.mkdtemp(prefix="fake-k8s-tls-"))
    cert_path, key_path = folder / "tls.crt", folder / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def server_context() -> ssl.SSLContext:
    cert_path, key_path = certificate()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context
