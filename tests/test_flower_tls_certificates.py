"""fedemstats.flower.certificates: the files Flower's TLS and SuperNode authentication read (no processes)."""
import ipaddress
import stat

import pytest

pytest.importorskip("flwr", reason="Flower tests need the optional extra: pip install 'fedemstats[flower]'")

from cryptography import x509  # noqa: E402  (a Flower dependency)
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from flwr.supercore.primitives.asymmetric import uses_nist_ec_curve  # noqa: E402

from fedemstats.flower.certificates import main, make_node_keys, make_tls_files  # noqa: E402


def test_server_certificate_is_signed_by_the_ca_for_the_hosts(tmp_path):
    tls = make_tls_files(tmp_path, hosts=("127.0.0.1", "::1", "localhost", "link.example"))
    ca = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
    server = x509.load_pem_x509_certificate(tls.server_cert.read_bytes())
    server.verify_directly_issued_by(ca)  # raises if not signed by the CA
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("127.0.0.1"),
                                                            ipaddress.ip_address("::1")}
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "link.example"}
    key = serialization.load_pem_private_key(tls.server_key.read_bytes(), None)
    assert key.public_key().public_numbers() == server.public_key().public_numbers()
    assert stat.S_IMODE(tls.server_key.stat().st_mode) == 0o600
    assert not (tmp_path / "ca.key").exists()  # the CA key is never written


def test_node_keys_load_the_way_flower_loads_them(tmp_path):
    keys = make_node_keys(tmp_path, "node-0")
    # flower-supernode --auth-supernode-private-key: load_ssh_private_key, an EC key
    private = serialization.load_ssh_private_key(keys.private_key.read_bytes(), None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    # flwr supernode register: load_ssh_public_key, an EC key on a NIST curve
    public = serialization.load_ssh_public_key(keys.public_key.read_bytes())
    assert isinstance(public, ec.EllipticCurvePublicKey) and uses_nist_ec_curve(public)
    assert public.public_numbers() == private.public_key().public_numbers()
    assert stat.S_IMODE(keys.private_key.stat().st_mode) == 0o600
    first = keys.public_key.read_bytes()
    assert make_node_keys(tmp_path, "node-0").public_key.read_bytes() != first  # a fresh pair each call


@pytest.mark.parametrize("kwargs, match", [({"hosts": ()}, "hosts"), ({"days": 0}, "days")])
def test_bad_tls_arguments_are_named(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_tls_files(tmp_path, **kwargs)


@pytest.mark.parametrize("name", ["", "../x", ".hidden"])
def test_bad_node_key_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="name"):
        make_node_keys(tmp_path, name)


def test_command_line_writes_everything(tmp_path):
    main([str(tmp_path / "certs"), "--nodes", "2", "--host", "10.0.0.5"])
    names = sorted(p.name for p in (tmp_path / "certs").iterdir())
    assert names == ["ca.crt", "node-0", "node-0.pub", "node-1", "node-1.pub", "server.key", "server.pem"]
    server = x509.load_pem_x509_certificate((tmp_path / "certs" / "server.pem").read_bytes())
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
    with pytest.raises(SystemExit):
        main([str(tmp_path / "other"), "--nodes", "-1"])
