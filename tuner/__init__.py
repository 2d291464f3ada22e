"""Autotuner: Optuna searches the tiling knobs per key and writes the shipped tables."""
