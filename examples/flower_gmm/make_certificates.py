"""Write self-signed TLS files and SuperNode key pairs for the example's secured deployment.

Usage: python make_certificates.py OUT_DIR [--nodes 3] [--host 127.0.0.1 ...] [--days 30]

Writes OUT_DIR/ca.crt, server.pem, server.key (the SuperLink's --ssl-ca-certfile,
--ssl-certfile, --ssl-keyfile; ca.crt is also the SuperNodes' --root-certificates and
the flwr connection's root-certificates) and, per SuperNode, OUT_DIR/node-<i> (its
--auth-supernode-private-key) and node-<i>.pub (registered with
`flwr supernode register`). See docs/flower.md. Keep OUT_DIR outside this folder:
keys are secrets and `flwr run .` bundles this folder.
"""
from fedemstats.flower.certificates import main

if __name__ == "__main__":
    main()
