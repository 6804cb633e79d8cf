"""ServerApp of the example: every setting comes from ``[tool.flwr.app.config]``."""
from fedemstats.flower import make_private_server_app

app = make_private_server_app()
