"""``ember.train``: DataLoader, Learner, metrics, History."""

from ember.train.dataloader import DataLoader
from ember.train.history import History
from ember.train.learner import EarlyStopping, Learner
from ember.train.metrics import Accuracy, Metric, TopKAccuracy
# Declares the cross-process all-reduce op, with the other ops, at import (no CuPy needed).
from ember.train import nccl_reduce as _nccl_reduce  # noqa: F401

__all__ = ["Accuracy", "DataLoader", "EarlyStopping", "History", "Learner", "Metric",
           "TopKAccuracy"]
