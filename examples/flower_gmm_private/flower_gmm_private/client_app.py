"""ClientApp of the example: a node reads its own CSV partition, draws its own secret noise
key, and answers Flower's SecAgg+ protocol (``secaggplus_mod``)."""
from fedemstats.flower import GMMProblem, load_csv_partition, make_private_client_app

app = make_private_client_app(GMMProblem, load_partition=load_csv_partition)
