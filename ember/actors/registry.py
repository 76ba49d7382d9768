"""The live device actors, created on first use and stopped at interpreter exit."""

from __future__ import annotations

import atexit
import threading

from ember.actors.device_actor import DeviceActor

_actors: dict[str, DeviceActor] = {}
_lock = threading.Lock()


def actor_for(name: str, kind: str, index: int) -> DeviceActor:
    """The actor of device ``name``, started with its backend on first use."""
    actor = _actors.get(name)
    if actor is not None:
        return actor
    with _lock:
        actor = _actors.get(name)
        if actor is None:
            from ember.kernels import create_backend

            actor = DeviceActor(name, create_backend(kind, index))
            _actors[name] = actor
    return actor


def live_actors() -> list[DeviceActor]:
    return list(_actors.values())


def _shutdown() -> None:
    # Queued work is discarded: exiting with work in flight must neither hang nor print.
    for actor in live_actors():
        actor.stop(timeout=1.0)


atexit.register(_shutdown)
