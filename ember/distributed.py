"""``ember.distributed``: a Ray cluster whose workers host ember's device actors.

``RayCluster(num_workers)`` starts (or joins) a Ray cluster and places one Ray actor
per worker; each such actor is a process running its own ember runtime with
``devices_per_worker`` devices. ``train.Learner(model_fn, optimizer_fn, loss_fn,
cluster=cluster)`` trains on it. Ray places, restarts and transports; ember adds no
cluster layer of its own. On GPUs the gradients are summed over NCCL instead
(``transport="nccl"``, one rank per worker); ``NcclCommunicator`` and ``nccl_unique_id``
make that sum usable without Ray, in processes the caller starts.

A local cluster (``address=None``) stays on this machine's loopback, whatever the
caller imported first. Starting one changes, for this process and the Ray processes
it starts:

- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (and Ray's constant read from it, when ray
  was imported already): Ray's servers bind 127.0.0.1 and its processes talk over it,
  instead of listening on every interface and using the machine's own address;
- ``RAY_USAGE_STATS_ENABLED=0``: no usage report;
- ``~/ray_bootstrap_config.yaml``, written (empty, a comment) only where none exists:
  Ray's dashboard reads it for its usage record and, without it, probes the cloud
  metadata service (169.254.169.254, metadata.google.internal), usage stats on or off.
  Ray's autoscaler writes its own file there on the head nodes it launches.

and refuses to start (``RuntimeError``) when Ray's node address is not loopback.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ember.train.nccl_reduce import NcclCommunicator, unique_id

_LOOPBACK = "127.0.0.1"
_BOOTSTRAP = "~/ray_bootstrap_config.yaml"


class RayCluster:
    """``num_workers`` Ray actors, each a process hosting ``devices_per_worker`` devices.

    Args:
        num_workers: worker processes (data-parallel ranks ``0 .. num_workers - 1``).
        devices_per_worker: ember devices in each worker (``cpu:k`` or ``cuda:k``).
        device: ``"cpu"`` or ``"cuda"`` (each worker then reserves that many GPUs).
        address: None starts a local Ray cluster bound to 127.0.0.1; ``"auto"`` or an
            address joins an existing cluster.
        max_restarts: how many times Ray restarts a worker process that dies.
        transport: how a step's gradients are summed over the workers: ``"nccl"`` (the
            default on ``"cuda"``: one NCCL rank per worker, on its first GPU, the sum
            made on the GPUs; see ``ember.train.nccl_reduce``) or ``"object_store"``
            (the default, and the only choice, on ``"cpu"``: each worker's gradients
            travel as host arrays through Ray's object store to every worker).

    Use as a context manager, or call ``shutdown()``; the Ray processes a local cluster
    started end with it.

    Raises:
        ImportError: ray is not installed (``pip install 'ember[ray]'``).
        RuntimeError: the local cluster's node address is not loopback.
        ValueError: a bad count, device or transport (``"nccl"`` needs ``"cuda"``).

    Example:
        With ``from ember import distributed as dist``:

        >>> with dist.RayCluster(num_workers=2) as cluster:
        ...     learner = train.Learner(make_model, make_optimizer, F.cross_entropy,
        ...                             cluster=cluster)
        ...     history = learner.fit_sync(loader, epochs=3)   # learner.model: the weights
    """

    def __init__(self, num_workers: int, devices_per_worker: int = 1, device: str = "cpu",
                 address: str | None = None, max_restarts: int = 4,
                 transport: str | None = None) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"RayCluster: num_workers must be an int >= 1, got {num_workers!r}")
        if not isinstance(devices_per_worker, int) or devices_per_worker < 1:
            raise ValueError(f"RayCluster: devices_per_worker must be an int >= 1, "
                             f"got {devices_per_worker!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"RayCluster: device must be 'cpu' or 'cuda', got {device!r}")
        transport = transport or ("nccl" if device == "cuda" else "object_store")
        if transport not in ("nccl", "object_store") or (transport == "nccl"
                                                          and device != "cuda"):
            raise ValueError(f"RayCluster: transport must be 'object_store', or 'nccl' on "
                             f"device='cuda'; got {transport!r} on {device!r}")
        self.num_workers = num_workers
        self.devices_per_worker = devices_per_worker
        self.device = device
        self.address = address
        self.transport = transport
        self._owns_ray = address is None
        ray = _import_ray(local=self._owns_ray)
        if self._owns_ray:
            if ray.is_initialized():
                raise RuntimeError("RayCluster: ray is already initialized in this process; "
                                   "pass address='auto' to join that cluster")
            gpus = num_workers * devices_per_worker if device == "cuda" else 0
            ray.init(address="local", _node_ip_address=_LOOPBACK, include_dashboard=False,
                     num_cpus=max(num_workers * devices_per_worker, os.cpu_count() or 1),
                     num_gpus=gpus, configure_logging=False, log_to_driver=True)
            try:
                _check_loopback(ray)
            except BaseException:
                ray.shutdown()
                raise
        elif not ray.is_initialized():
            ray.init(address=address, configure_logging=False)
        host = ray.remote(_WorkerHost).options(
            num_cpus=devices_per_worker if device == "cpu" else 1,
            num_gpus=devices_per_worker if device == "cuda" else 0,
            max_restarts=max_restarts, max_task_retries=0)
        self.workers = [host.remote(rank, num_workers, device, devices_per_worker)
                        for rank in range(num_workers)]
        self._closed = False

    @property
    def world(self) -> int:
        """Every device of every worker: the data-parallel width."""
        return self.num_workers * self.devices_per_worker

    def worker_pids(self) -> list[int]:
        """The process id of each worker (a restarted worker has a new one)."""
        import ray

        return ray.get([w.call.remote(_pid) for w in self.workers])

    def ray_pids(self) -> list[int]:
        """The process ids of the local cluster's Ray processes (GCS, raylet, ...), and of
        its workers: everything ``shutdown`` ends."""
        import ray

        node = ray._private.worker._global_node
        pids = []
        if node is not None:
            for handles in node.all_processes.values():
                pids.extend(h.process.pid for h in handles)
        return pids + self.worker_pids()

    def shutdown(self) -> None:
        """End the workers; a local cluster's Ray processes end too."""
        if self._closed:
            return
        self._closed = True
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        where = "local 127.0.0.1" if self._owns_ray else self.address
        return (f"RayCluster({self.num_workers} workers x {self.devices_per_worker} "
                f"{self.device}, {self.transport}, {where})")


class _WorkerHost:
    """The Ray actor of one worker: runs ``fn(context, *args)`` for the driver, where
    ``context`` is this worker's state (its rank, devices, model...). A restarted worker
    starts with a fresh context; the driver sets it up again."""

    def __init__(self, rank: int, world: int, device: str, devices_per_worker: int) -> None:
        self.context: dict[str, Any] = {"rank": rank, "world": world, "device": device,
                                        "devices_per_worker": devices_per_worker}

    def call(self, fn: Callable, *args: Any) -> Any:
        return fn(self.context, *args)


def _pid(context: dict[str, Any]) -> int:
    return os.getpid()


def _import_ray(local: bool) -> Any:
    """``ray``, pinned to loopback for a local cluster even when it was imported before."""
    if local:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        bootstrap = Path(_BOOTSTRAP).expanduser()
        if not bootstrap.exists():
            bootstrap.write_text("# Written by ember.distributed: Ray's dashboard reads this "
                                 "file instead of probing the cloud metadata service.\n")
    try:
        import ray
    except ImportError as exc:
        raise ImportError("ember.distributed needs ray: pip install 'ember[ray]'") from exc
    if local and "ray._private.ray_constants" in sys.modules:
        sys.modules["ray._private.ray_constants"].ENABLE_RAY_CLUSTER = False
    return ray


def _check_loopback(ray: Any) -> None:
    addresses = [ray.util.get_node_ip_address()]
    addresses += [node["NodeManagerAddress"] for node in ray.nodes()]
    for address in addresses:
        if not ipaddress.ip_address(address).is_loopback:
            raise RuntimeError(f"RayCluster: Ray's node address is {address}, not loopback; "
                               f"refusing to run a local cluster that others could reach")


def nccl_unique_id() -> bytes:
    """A new NCCL unique id for ``NcclCommunicator`` (rank 0 makes it and hands it to every
    rank; no Ray needed).

    Raises:
        ImportError: CuPy, or CuPy's NCCL, is not installed.
    """
    return unique_id()


__all__ = ["NcclCommunicator", "RayCluster", "nccl_unique_id"]
