"""Write CSV partitions of a heterogeneous Gaussian-mixture sample for the Flower example.

Usage: python make_partitions.py OUT_DIR [--partitions 10] [--rows 300] [--dim 2]
       [--components 3] [--alpha 0.5] [--seed 0]

Each partition draws its own component proportions from Dirichlet(alpha), so
clients are heterogeneous. Files are ``OUT_DIR/partition-<i>.csv`` (no header).
"""
import argparse
import logging
import os

import numpy as np

#: spread of the true component means around the origin
MEAN_SCALE = 4.0
logger = logging.getLogger("make_partitions")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--components", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    centres = rng.normal(scale=MEAN_SCALE, size=(args.components, args.dim))
    os.makedirs(args.out_dir, exist_ok=True)
    for i in range(args.partitions):
        labels = rng.choice(args.components, size=args.rows, p=rng.dirichlet(np.full(args.components, args.alpha)))
        rows = centres[labels] + rng.normal(size=(args.rows, args.dim))
        np.savetxt(os.path.join(args.out_dir, f"partition-{i}.csv"), rows, delimiter=",", fmt="%.17g")
    logging.basicConfig(level=logging.INFO)
    logger.info("wrote %d partitions of %d rows to %s", args.partitions, args.rows, args.out_dir)


if __name__ == "__main__":
    main()
