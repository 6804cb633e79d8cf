"""ClientApp of the poisoning test: the example's node, whose ``train`` replies are corrupted
where the run config's ``poison`` key says (:func:`.faults.poisoned_client_app`)."""
from fedemstats.flower import GMMProblem, load_csv_partition

from .faults import poisoned_client_app

app = poisoned_client_app(GMMProblem, load_partition=load_csv_partition)
