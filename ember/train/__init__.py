"""``ember.train``: DataLoader, Learner, metrics, History."""

from ember.train.dataloader import DataLoader
from ember.train.history import History
from ember.train.learner import EarlyStopping, Learner
from ember.train.metrics import Accuracy, Metric, TopKAccuracy

__all__ = ["Accuracy", "DataLoader", "EarlyStopping", "History", "Learner", "Metric",
           "TopKAccuracy"]
