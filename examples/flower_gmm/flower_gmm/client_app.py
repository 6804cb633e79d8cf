"""ClientApp of the example: a node reads its own CSV partition and serves the problem the run
config names (``problem = "gmm"``, ``"fa"`` or ``"imputer"``; rebuilt from the package's allow-list)."""
from fedemstats.flower import load_csv_partition, make_client_app

app = make_client_app(None, load_partition=load_csv_partition)
