"""ServerApp of the poisoning test: the production one, unchanged (every setting from the run config)."""
from fedemstats.flower import make_server_app

app = make_server_app()
