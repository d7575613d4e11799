"""A throwaway certificate authority and serving certificate for the loopback API server.

kubectl (client-go's clientcmd) only sends a kubeconfig's bearer token over TLS, so the
server speaks HTTPS with a fresh self-signed CA per cluster; the kubeconfig carries the CA.
EC P-256 keys keep generation and handshakes cheap.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["ServingCerts"]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass(frozen=True, slots=True)
class ServingCerts:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def generate(cls, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> ServingCerts:
        now = dt.datetime.now(dt.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (
            x509.CertificateBuilder()
            .subject_name(_name("simcluster-ca"))
            .issuer_name(_name("simcluster-ca"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name("simcluster-apiserver"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        enc = serialization.Encoding.PEM
        key_pem = key.private_bytes(
            enc, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cls(ca.public_bytes(enc), cert.public_bytes(enc), key_pem)

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as d:
            cert, key = Path(d, "tls.crt"), Path(d, "tls.key")
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)
            ctx.load_cert_chain(cert, key)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        return ctx
