"""Benchmarks of macprof itself: does the profiler slow what it measures? (``macprof overhead``)
A consumer of every stage, like the CLI: ``loop`` times the decode loop in-process, ``fullpath``
times the whole ``macprof run`` path (worker process, RSS sampling, journal) against the engine's
own benchmark in a process of its own, ``server`` sets a server's whole path against a minimal
streaming client (``fake_server``: a loopback server with a fixed rhythm)."""
