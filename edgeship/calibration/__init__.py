"""Calibration and evaluation data: reading, checking against the model's inputs, sampling."""
from edgeship.calibration.datasets import Dataset, load_dataset, random_dataset

__all__ = ["Dataset", "load_dataset", "random_dataset"]
