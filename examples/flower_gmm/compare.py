"""Compare a Flower run's result JSON with the in-process FedEM run on the same partitions.

Usage: python compare.py RESULT_JSON DATA_DIR
"""
import json
import logging
import os
import sys

import numpy as np

from fedemstats.flower import FedEMSettings
from fedemstats.flower.problems import problem_from_spec
from fedemstats.flower.reference import max_abs_difference, reference_run

logger = logging.getLogger("compare")


def main(result_path, data_dir):
    with open(result_path, encoding="utf-8") as fh:
        result = json.load(fh)
    parts = [np.loadtxt(os.path.join(data_dir, f"partition-{p}.csv"), delimiter=",", ndmin=2)
             for p in result["partitions"]]
    settings = FedEMSettings(**{**result["settings"], "n_rounds": result["round"]})
    reference = reference_run(parts, problem_from_spec(result["problem"]), settings)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, diff in max_abs_difference(result, reference).items():
        logger.info("max |flower - in-process| %-12s %.3g", name, diff)


if __name__ == "__main__":
    main(*sys.argv[1:3])
