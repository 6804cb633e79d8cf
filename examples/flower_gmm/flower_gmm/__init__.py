"""Flower App: FedEM for a Gaussian mixture on CSV partitions (fedemstats example)."""
