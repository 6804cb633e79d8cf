"""ClientApp of the example: a node reads its own CSV partition and serves GMM problems."""
from fedemstats.flower import GMMProblem, load_csv_partition, make_client_app

app = make_client_app(GMMProblem, load_partition=load_csv_partition)
