"""Self-signed TLS certificates and SuperNode key pairs for a Flower deployment.

For tests, the example app and trying a deployment on one's own machines; a
production federation should use certificates from its own CA. Uses the
``cryptography`` package, which Flower already depends on.

* :func:`make_tls_files` writes a CA (``ca.crt``), and a server certificate
  (``server.pem``) signed by it with its private key (``server.key``), valid for
  the given host names and IP addresses. They are the SuperLink's
  ``--ssl-ca-certfile``, ``--ssl-certfile`` and ``--ssl-keyfile``; ``ca.crt`` is
  what SuperNodes (``--root-certificates``) and the ``flwr`` CLI
  (``root-certificates`` in the connection) use to verify the SuperLink.
* :func:`make_node_keys` writes a SuperNode's EC P-384 key pair in OpenSSH format:
  ``<name>`` (private, ``flower-supernode --auth-supernode-private-key``) and
  ``<name>.pub`` (public, ``flwr supernode register <name>.pub <connection>``).

Private keys are written with mode 0600. Command line::

    python -m fedemstats.flower.certificates OUT_DIR [--nodes 3] [--host 127.0.0.1 ...]
"""
import argparse
import datetime
import ipaddress
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TLSFiles", "NodeKeys", "make_tls_files", "make_node_keys"]

logger = logging.getLogger(__name__)

#: the hosts a loopback deployment connects to
DEFAULT_HOSTS = ("127.0.0.1", "::1", "localhost")
#: curve of every key (Flower's node authentication needs a NIST curve; P-384 as in its guide)
CURVE = ec.SECP384R1


@dataclass(frozen=True)
class TLSFiles:
    """Paths of the SuperLink's TLS files."""

    ca_cert: Path  #: --ssl-ca-certfile (SuperLink), --root-certificates (SuperNode), root-certificates (flwr)
    server_cert: Path  #: --ssl-certfile
    server_key: Path  #: --ssl-keyfile


@dataclass(frozen=True)
class NodeKeys:
    """Paths of one SuperNode's authentication key pair."""

    private_key: Path  #: flower-supernode --auth-supernode-private-key
    public_key: Path  #: flwr supernode register PUBLIC_KEY CONNECTION


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    """Write ``data`` to ``path`` (a private file is created with mode 0600, never world-readable)."""
    path = Path(path)
    if path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


def _san(hosts):
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedemstats"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls_files(directory, hosts=DEFAULT_HOSTS, days: int = 30) -> TLSFiles:
    """Write ``ca.crt``, ``server.pem`` and ``server.key`` into ``directory``.

    The server certificate is valid for ``hosts`` (IP addresses and DNS names, as
    subject alternative names: gRPC checks the address the client dialled) for
    ``days`` days. The CA's private key signs the server certificate and is then
    discarded: nothing else can be signed with it later.
    """
    if not hosts:
        raise ValueError("hosts must name at least one host name or IP address")
    if days < 1:
        raise ValueError(f"days must be a positive number of days, got {days!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(CURVE())
    ca_name = _name("fedemstats test CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))

    server_key = ec.generate_private_key(CURVE())
    server_cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca_name)
                   .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(_san(hosts), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False)
                   .sign(ca_key, hashes.SHA256()))

    pem = serialization.Encoding.PEM
    return TLSFiles(
        ca_cert=_write(directory / "ca.crt", ca_cert.public_bytes(pem)),
        server_cert=_write(directory / "server.pem", server_cert.public_bytes(pem)),
        server_key=_write(directory / "server.key",
                          server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()), private=True),
    )


def make_node_keys(directory, name: str) -> NodeKeys:
    """Write one SuperNode's EC P-384 key pair: ``directory/name`` and ``directory/name.pub`` (OpenSSH)."""
    if not name or os.sep in name or name.startswith("."):
        raise ValueError(f"name must be a plain file name, got {name!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(CURVE())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return NodeKeys(private_key=_write(directory / name, private, private=True),
                    public_key=_write(directory / f"{name}.pub", public + b"\n"))


def main(argv=None):
    """Command line: write the SuperLink's TLS files and ``--nodes`` SuperNode key pairs."""
    parser = argparse.ArgumentParser(prog="python -m fedemstats.flower.certificates",
                                     description="Self-signed TLS files and SuperNode keys for a Flower deployment.")
    parser.add_argument("out_dir")
    parser.add_argument("--nodes", type=int, default=3, help="number of SuperNode key pairs (node-0, node-1, ...)")
    parser.add_argument("--host", action="append", dest="hosts",
                        help="host name or IP address the SuperLink is reached at (repeatable; "
                             f"default: {' '.join(DEFAULT_HOSTS)})")
    parser.add_argument("--days", type=int, default=30, help="validity of the certificates in days")
    args = parser.parse_args(argv)
    if args.nodes < 0:
        parser.error(f"--nodes must be >= 0, got {args.nodes}")
    if args.days < 1:
        parser.error(f"--days must be >= 1, got {args.days}")
    out = Path(args.out_dir)
    tls = make_tls_files(out, hosts=tuple(args.hosts or DEFAULT_HOSTS), days=args.days)
    keys = [make_node_keys(out, f"node-{i}") for i in range(args.nodes)]
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logger.info("CA certificate      %s\nserver certificate  %s\nserver private key  %s",
                tls.ca_cert, tls.server_cert, tls.server_key)
    for k in keys:
        logger.info("SuperNode keys      %s  %s", k.private_key, k.public_key)


if __name__ == "__main__":
    main()
