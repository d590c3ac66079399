"""Wave 6, the eighth by-hand round (bench/mutants.py --planted bench/planted/wave6-hand8.jsonl: 30 slips planted by a
helper who read only the package's diff): one test per survivor. Each names its change, fails with it and passes
without it, and asserts values worked out here."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("address, expected", [("[2001:db8::7]:6379", ("2001:db8::7", 6379)),
                                               ("10.1.2.3:6380", ("10.1.2.3", 6380))])
def test_the_cluster_probe_splits_host_and_port_at_the_last_colon(monkeypatch, address, expected):
    """Changed: ``gcs.rpartition(":")`` -> ``partition`` in ``cluster.probe``: an IPv6 head's address
    (``[2001:db8::7]:6379``, as Ray writes it and keeps it) is split at its last colon, so the probe dials the host
    and port of the head, not a host ``[2001`` and a port ``db8::7]:6379`` that no address has. Ray's own
    canonicalization runs; the connection is recorded, and token authentication ends the probe after it."""
    from sao_env import cluster

    dialled = []

    class Connection:
        def close(self) -> None:
            dialled.append("closed")

    def connect(where, timeout):
        dialled.append((where, timeout))
        return Connection()

    monkeypatch.setattr(cluster.socket, "create_connection", connect)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert cluster.probe(address) is None
    assert dialled == [(expected, 3), "closed"]
