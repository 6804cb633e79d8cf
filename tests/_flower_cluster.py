"""A real Flower deployment on 127.0.0.1 for the deployment tests and the TLS benchmark.

:class:`Cluster` starts ``flower-superlink`` and ``flower-supernode`` processes on
free loopback ports with a temporary FLWR_HOME, telemetry and runtime dependency
installation off, and stops every process it started by process group.

``secure=True`` (the documented deployment, docs/flower.md) runs the way Flower
1.41 secures a federation:

* TLS: a self-signed CA and server certificate (``fedemstats.flower.certificates``)
  given to ``flower-superlink --ssl-ca-certfile --ssl-certfile --ssl-keyfile``;
  SuperNodes verify it with ``--root-certificates``, the ``flwr`` CLI with
  ``root-certificates`` in its SuperLink connection;
* SuperNode authentication: ``flower-superlink --enable-supernode-auth``; each
  node's EC public key is registered with ``flwr supernode register KEY.pub
  CONNECTION`` before the node starts with ``--auth-supernode-private-key KEY``.
  A SuperNode whose key is not registered is refused at activation.

``secure=False`` is the ``--insecure`` deployment (for the benchmark only).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fedemstats.flower.certificates import make_node_keys, make_tls_files

BIN = Path(sys.executable).parent
APP_DIR = Path(__file__).resolve().parent.parent / "examples" / "flower_gmm"
#: bounded waits (seconds)
START_TIMEOUT, STOP_TIMEOUT, CLI_TIMEOUT = 30.0, 10.0, 60.0
POLL = 0.05


def tools_installed():
    return all((BIN / tool).exists() for tool in ("flower-superlink", "flower-supernode", "flwr"))


#: ports this process has handed out: the kernel may offer a port again as soon as its probe
#: socket closes, and two SuperNodes given the same one made CI fail (one died with EADDRINUSE
#: and the run waited for it until its timeout)
_HANDED_OUT: set = set()


def free_port() -> int:
    """A loopback port nothing listens on now and that this process has not handed out before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_port(port, timeout=START_TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(POLL)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


class Cluster:
    """SuperLink + SuperNodes as child processes, each in its own process group."""

    def __init__(self, root: Path, data: Path, secure: bool = True):
        self.root, self.data, self.secure = Path(root), Path(data), secure
        self.procs, self.logs, self.node_keys, self.registered = {}, {}, {}, {}
        home = self.root / "flwr_home"
        home.mkdir()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        if secure:
            self.certs = self.root / "certificates"
            self.tls = make_tls_files(self.certs)
            transport = f'root-certificates = "{self.tls.ca_cert}"\n'
        else:
            transport = "insecure = true\n"
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "{self.address}"\n{transport}')
        self.env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

    # -- processes -------------------------------------------------------------------------
    def _spawn(self, name, args):
        log = open(self.root / f"{name}.log", "w")  # noqa: SIM115 - closed in stop()
        self.logs[name] = log
        self.procs[name] = subprocess.Popen([str(BIN / args[0]), *args[1:]], env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def start_superlink(self):
        if self.secure:
            transport = ["--ssl-ca-certfile", str(self.tls.ca_cert), "--ssl-certfile", str(self.tls.server_cert),
                         "--ssl-keyfile", str(self.tls.server_key), "--enable-supernode-auth"]
        else:
            transport = ["--insecure"]
        self._spawn("superlink", ["flower-superlink", *transport, "--host", "127.0.0.1", "--port", str(self.port),
                                  "--disable-runtime-dependency-installation"])
        wait_port(self.port)

    def make_keys(self, name):
        """A fresh key pair for SuperNode ``name`` (not registered)."""
        self.node_keys[name] = make_node_keys(self.certs, name)
        return self.node_keys[name]

    def register(self, names):
        """Register the public keys of ``names`` with the SuperLink (concurrently); returns {name: node id}."""
        procs = {n: subprocess.Popen([str(BIN / "flwr"), "supernode", "register", str(self.node_keys[n].public_key),
                                      "test", "--format", "json"], env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True) for n in names}
        ids = {}
        for n, p in procs.items():
            out, err = p.communicate(timeout=CLI_TIMEOUT)
            assert p.returncode == 0, f"flwr supernode register {n}: {out}{err}"
            ids[n] = int(json.loads(out[out.index("{"):])["node-id"])
        return ids

    def start_node(self, name, partition, plaintext=False, extra_config=None):
        """Start SuperNode ``name`` serving ``partition-<partition>.csv``.

        In a secure cluster the node verifies the SuperLink with the CA and signs with
        its key pair (made here if :meth:`make_keys` was not called); ``plaintext=True``
        makes it speak plain HTTP (``--insecure``, hence no key: Flower refuses to sign
        over an insecure channel) to the TLS SuperLink.
        """
        node_config = f'partition-id={partition} data-path="{self.data / f"partition-{partition}.csv"}"'
        for key, value in (extra_config or {}).items():
            node_config += f" {key}={json.dumps(value)}"
        if self.secure and not plaintext:
            keys = self.node_keys.get(name) or self.make_keys(name)
            transport = ["--root-certificates", str(self.tls.ca_cert), "--auth-supernode-private-key",
                         str(keys.private_key)]
        elif self.secure:
            transport = ["--insecure", "--max-retries", "2"]
        else:
            transport = ["--insecure"]
        self._spawn(name, ["flower-supernode", *transport, "--superlink", self.address,
                           "--host", "127.0.0.1", "--port", str(free_port()), "--node-config", node_config])

    def start(self, n_nodes, extra_config=None):
        """SuperLink, then ``n_nodes`` SuperNodes node0, node1, ... (keys registered first when secure),
        each with ``extra_config`` added to its node config."""
        self.start_superlink()
        names = [f"node{i}" for i in range(n_nodes)]
        if self.secure:
            for n in names:
                self.make_keys(n)
            self.registered = self.register(names)
        for i, n in enumerate(names):
            self.start_node(n, i, extra_config=extra_config)

    def wait_exit(self, name, timeout=START_TIMEOUT):
        return self.procs[name].wait(timeout)

    def kill(self, name):
        """SIGKILL a child's whole process group (the process and the apps it launched)."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT)

    def stop(self):
        """SIGTERM every process group at once, wait (bounded), SIGKILL what is left; close the logs."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_TIMEOUT
        for name, proc in self.procs.items():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(STOP_TIMEOUT)
            finally:
                self.logs[name].close()

    # -- the flwr CLI ----------------------------------------------------------------------
    def flwr(self, *args):
        done = subprocess.run([str(BIN / "flwr"), *args], env=self.env, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT)
        assert done.returncode == 0, f"flwr {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def flwr_run(self, app_dir=APP_DIR, **config):
        """``flwr run`` of the Flower app in ``app_dir`` (default the example's) with run config ``config``."""
        values = " ".join(f"{k}={json.dumps(v)}" for k, v in config.items())
        return self.flwr("run", str(app_dir), "test", "--run-config", values)

    def nodes(self):
        """{node id: status} from ``flwr supernode list``."""
        out = self.flwr("supernode", "list", "test", "--format", "json")
        return {int(n["node-id"]): n["status"] for n in json.loads(out[out.index("{"):])["nodes"]}

    # -- logs ------------------------------------------------------------------------------
    def log(self, name):
        return (self.root / f"{name}.log").read_text(errors="replace")

    def log_tail(self, n=15):
        return "\n".join(f"--- {k} (exit {p.poll()})\n" + "\n".join(self.log(k).splitlines()[-n:])
                         for k, p in self.procs.items())


def wait_result(path: Path, round_, cluster, timeout, on_round=None):
    """Poll the run's result JSON until it records ``round_``; ``on_round(round, mtime_ns)`` sees each new round."""
    deadline, seen = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        try:
            stat = path.stat()
            result = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or caught mid-write
            result = None
        if result is not None:
            if on_round is not None and result["round"] > seen:
                on_round(result["round"], stat.st_mtime_ns)
            seen = max(seen, result["round"])
            if result["round"] >= round_:
                return result
        time.sleep(POLL)
    raise TimeoutError(f"round {round_} not reached in {timeout:g} s\n{cluster.log_tail()}")
