"""Differentially private FedEM with secure aggregation, as a Flower App (docs/privacy.md)."""
