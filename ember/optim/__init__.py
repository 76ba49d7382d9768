"""``ember.optim``: optimizers (a pure per-parameter update in a thin stateful shell),
gradient clipping and learning-rate schedulers (``optim.lr_scheduler``).

Example:
    >>> opt = optim.Adam(model.parameters(), lr=1e-3)
    >>> grads = F.cross_entropy(model(x), y).backward()
    >>> optim.clip_grad_norm(grads, 1.0)
    >>> opt.step(grads)          # returns at once; the update runs on the device
"""

from ember.optim import lr_scheduler
from ember.optim.adagrad import Adagrad
from ember.optim.adam import Adam, AdamW
from ember.optim.clip import clip_grad_norm, clip_grad_value
from ember.optim.grad_scaler import GradScaler
from ember.optim.optimizer import Optimizer, OptimizerStatistics
from ember.optim.rmsprop import RMSprop
from ember.optim.sgd import SGD

__all__ = [
    "Adagrad", "Adam", "AdamW", "GradScaler", "Optimizer", "OptimizerStatistics", "RMSprop", "SGD",
    "clip_grad_norm", "clip_grad_value", "lr_scheduler",
]
