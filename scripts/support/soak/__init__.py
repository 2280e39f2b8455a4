"""An endurance run of the camera daemon, with faults on a schedule and every frame
accounted for. Maintainer tool; CI runs three minutes of it (.ci/run).

    sudo uv run python -m scripts.soak --minutes 60 --out soak [--models DIR]
        [--precision fp16] [--fps 2] [--size 640x480] [--threads 1] [--plots]
    uv run python -m scripts.soak --recheck --out soak   # judge a finished run again

The real daemon (``python -m edge run``) as a process, supervised as its systemd unit
would be (systemd/da3-edge.service): sd_notify over a real AF_UNIX socket, a watchdog of
WatchdogSec=30 (no ping for 30 s: SIGABRT), Restart=on-failure after RestartSec=5, and
the start limit (5 starts in 300 s: the run fails). The fake camera (640x480, 2
frames/s) stands in for the sensor; the store is a size-limited tmpfs of its own, in a
private mount namespace, smaller than the ring's ``store.max_bytes``. The faults, at
the same fractions of any length of run (``schedule``): a thread's crash and a SIGKILL
(then the restarts), camera read errors, a camera hang shorter than
``daemon.stuck_after`` (the fake's script), a full disk (a filler file), a read-only
store (a tmpfs remount), an SD card that stalls (every fsync of the daemon sleeps 2.5 s
for a while: an LD_PRELOAD library, slowfsync.c, while persistence copies frames to a
folder on disk), a good SIGHUP reload and three bad ones (a config that does not
parse, one that is not UTF-8, a model folder the daemon may not enter: it runs without
the capabilities that skip permission checks), and a reload to a core that overflows
(infinite depth at most pixels) and back. A consumer follows ``latest`` throughout (edge.store.follow) and reads every
frame it is told of.

Every ``--sample-every`` seconds it records the summed VmRSS, open fds and threads of
the daemon and its core workers, the store's frames and bytes, and the counters of
``status.json``; then it checks (``RULES``; thresholds in the report):

- accounting: each cleanly stopped run's last status.json is exact (captured = written +
  dropped + failed + in flight); a SIGKILLed run's last status had at most the pipeline's
  capacity in flight (mailbox 1 + inference workers+1 + write queue 2 + writing 1), which
  bounds what the kill lost;
- flat memory: the median summed RSS of the window at 25-33 % of the run and of the last
  8 % differ by less than 5 MiB (an hour: minutes 15-20 against 55-60), with no restart
  from the first window on;
- no leaks: fds and threads are the same at every sample taken 10 s or more after the
  last fault (and the last start); the fds counted are those open at each of three
  readings 0.1 s apart (a file being written at the sampling instant is no leak; the
  others are kept in the sample as ``fds_transient``);
- the store stays within its ring (keep_frames, max_bytes) at every sample;
- no frame the consumer was told of was ever half-written; frames kept coming after
  every fault (the written count grew between the first sample after the fault and one
  of the same process 20 s or more later);
- while every fsync stalls, frames are still written: at least one every 2 s;
- while the core overflows, frames still come and say so, and no record the consumer
  read holds NaN or Infinity;
- no core worker outlives its daemon by more than 5 s, however the daemon ended.

Writes OUT/samples.jsonl, OUT/events.jsonl, OUT/report.json (with the accounting table)
and the daemon's log; ``--plots`` adds OUT/soak.png. Needs root (mounts) and Linux.

The parts: ``schedule`` (the faults and the windows), ``daemon`` (the daemon supervised
as its unit would be), ``sample`` (/proc and the store), ``rules`` (the judgement, pure),
``report`` (the verdict, a finished run judged again, the plot), ``run`` (the run: the
faults inflicted, the consumer) and ``__main__`` (the command).
"""
