"""The processes a run runs in: XLA flags set before JAX starts (cpu_flags.py,
quiet_start.py), several hosts as one job (multihost.py, peer_watch.py), preemption
(preemption.py), asynchronous dispatch (dispatch.py) and non-finite updates
(nonfinite.py). Nothing here imports JAX at package import."""
