"""Runtimes that schedule rollouts and the learner: ``sim`` (sim.py), ``threads`` (threads.py) and
``ray`` (ray_backend.py), sharing the scheduling core (core.py). See docs/runtime.md."""


def runtime_class(backend: str) -> type:
    """The runtime class of ``runtime.backend``; the real-time ones are imported only when chosen."""
    if backend == "threads":
        from sao_env.runtime.threads import ThreadsRuntime

        return ThreadsRuntime
    if backend == "ray":
        from sao_env.runtime.ray_backend import RayRuntime

        return RayRuntime
    from sao_env.runtime.sim import SimRuntime

    return SimRuntime
