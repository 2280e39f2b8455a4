"""The frame store, in one place: the daemon writes through it, consumers read through it.

- ``layout``: the names on disk (frames/<10 digits>/frame.<suffix>, ``latest``,
  ``status.json``, ``store-id``) and where a store goes by default;
- ``trust``: whether a store can be trusted, and opening its files without following
  a link (``check_root``, ``refuse_unsafe``, ``open_in``);
- ``read``: what ``latest`` points at, the frames published since, the JSON files;
- ``follow``: ``Follower``, told by inotify when ``latest`` or ``status.json`` changes;
- ``ring``: ``FrameStore``, the daemon's ring of frames, and ``Persistence``.

Everything but ``ring`` is free of numpy (serve and publish load no array code), so
this package imports none of its modules itself. docs/reference/store.md.
"""
