"""The camera daemon: capture -> infer -> write, continuously, surviving faults.

Three worker threads and the main thread, one object each (docs/architecture.md):

- ``Capture`` (thread "capture", capture.py): the camera, its faults and backoff;
  the newest frame goes into a one-slot mailbox (an unread one it replaces is
  counted as dropped).
- ``Inference`` (thread "infer", inference.py): the pipeline, overlapping the stages
  with the core (one or more worker processes); results in capture order.
- ``Writer`` (thread "write", writer.py): results into the ``FrameStore``; a full or
  read-only store costs frames, counted, never the loop.
- ``Daemon`` (main thread, service.py): signals, reload (reload.py), ``status.json``
  (status.py), sd_notify STATUS and the watchdog; what it is built from its config
  (the pipeline, the camera's streams, the store) is parts.py.

State is given to each in its constructor and every mutable attribute is written by
one thread; what each owns is in its docstring.
"""

from __future__ import annotations

from edge.daemon.service import Daemon
from edge.log import setup_logging

__all__ = ["Daemon", "setup_logging"]
