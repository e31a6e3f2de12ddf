"""Calibration and evaluation data: reading, checking against the model's inputs, sampling."""
from edgeship.calibration.dataset import Dataset
from edgeship.calibration.datasets import load_dataset, random_dataset

__all__ = ["Dataset", "load_dataset", "random_dataset"]
