"""The vLLM engine: its own environment, a server on 127.0.0.1 (``server.py``), started and stopped by the
command that needs it (``process.py``), and the rollout generator that drives it (``generator.py``)."""
