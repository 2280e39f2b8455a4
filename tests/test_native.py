"""edge.native: fd 2 caught around native loads, from any number of threads."""

from __future__ import annotations

import os
import threading
import time

from edge.native import captured_stderr


def test_two_threads_capturing_at_once_leave_fd2_where_it_was() -> None:
    """A reload's model load (main thread) beside a first run of the stages (inference
    thread): without one capture at a time, the second restores the first's temporary
    file as fd 2, and every later log line goes to a deleted file."""
    before = os.readlink("/proc/self/fd/2")
    boxes: dict[str, list[str]] = {"a": [], "b": []}
    entered = threading.Event()

    def first() -> None:
        with captured_stderr(boxes["a"]):
            entered.set()
            os.write(2, b"from a\n")
            time.sleep(0.2)  # b starts capturing meanwhile, and ends after a

    def second() -> None:
        entered.wait(5)
        with captured_stderr(boxes["b"]):
            time.sleep(0.4)
            os.write(2, b"from b\n")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    after = os.readlink("/proc/self/fd/2")
    print(before, after, boxes)
    assert after == before
    assert boxes == {"a": ["from a\n"], "b": ["from b\n"]}
