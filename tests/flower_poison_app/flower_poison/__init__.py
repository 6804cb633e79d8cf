"""Test-only Flower App: the FedEM GMM app with poisoned client replies (see :mod:`.faults`)."""
