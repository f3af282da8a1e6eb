"""Test certificates made with `cryptography`: a server certificate, a CA, a client
certificate the CA signed, and a rogue self-signed one. The `pki` fixture in
conftest.py writes them into a directory."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None = None,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.SERVER_AUTH,
) -> x509.Certificate:
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False
        ).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@dataclass
class Pki:
    dir: Path
    server_pem: bytes
    key_pem: bytes
    ca_pem: bytes


def make_pki(d: Path) -> Pki:
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("accel test CA", ca_key, ca=True)
    files = {
        "server.crt": _cert_pem(_cert("localhost", server_key)),
        "server.key": _key_pem(server_key),
        "other.key": _key_pem(ec.generate_private_key(ec.SECP256R1())),
        "encrypted.key": _key_pem(server_key, b"secret"),
        "ca.crt": _cert_pem(ca),
        "client.crt": _cert_pem(
            _cert(
                "prometheus",
                client_key,
                ("accel test CA", ca_key),
                usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            )
        ),
        "client.key": _key_pem(client_key),
        # A client certificate that signed itself: not from the CA.
        "rogue.crt": _cert_pem(_cert("rogue", rogue_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)),
        "rogue.key": _key_pem(rogue_key),
        "garbage.pem": b"this is not PEM\n",
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    return Pki(d, files["server.crt"], files["server.key"], files["ca.crt"])
