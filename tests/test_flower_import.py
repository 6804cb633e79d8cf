"""The Flower adapter is optional: without flwr, fedemstats imports and fedemstats.flower explains.

These tests do not need flwr; they hide it (and Ray) with a monkeypatched import.
"""
import builtins
import importlib
import subprocess
import sys
import textwrap

import pytest

_HIDDEN = ("flwr", "ray")


def _is_hidden(name):
    return any(name == h or name.startswith(h + ".") for h in _HIDDEN)


@pytest.fixture
def no_flower(monkeypatch):
    """Make ``import flwr`` (and ray) fail, and forget any already imported copies."""
    real_import = builtins.__import__

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and _is_hidden(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, globals, locals, fromlist, level)

    for mod in list(sys.modules):
        if _is_hidden(mod) or mod == "fedemstats.flower" or mod.startswith("fedemstats.flower."):
            monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_flower_subpackage_names_the_extra(no_flower):
    with pytest.raises(ImportError, match=r"fedemstats\[flower\]") as info:
        importlib.import_module("fedemstats.flower")
    assert "optional extra 'flower'" in str(info.value)


def test_fedemstats_imports_without_flower(no_flower):
    importlib.reload(importlib.import_module("fedemstats"))
    from fedemstats.algorithms.fedem import FedEM  # noqa: F401  (the engine never needs flwr)


def test_import_fedemstats_does_not_load_flwr():
    # a fresh interpreter: importing the package and the estimators must not pull in flwr
    code = textwrap.dedent("""
        import sys
        import fedemstats, fedemstats.algorithms, fedemstats.estimators.mixture
        print(any(m == "flwr" or m.startswith("flwr.") for m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_client_app_does_not_load_pandas():
    # every Flower message starts a fresh `flwr-clientapp` process that imports the app: pandas
    # (only needed to build a history frame, which a node never does) cost 0.4 s of each launch
    code = textwrap.dedent("""
        import sys
        import fedemstats.flower.client, fedemstats.flower.private_client
        print(sorted(m for m in ("pandas", "sklearn", "matplotlib") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
