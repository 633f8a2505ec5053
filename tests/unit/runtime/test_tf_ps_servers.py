"""A parameter server or worker of a tensorflow-ps job ends once the chief it serves is gone (a real socket stands
for the chief's port): never before the chief has listened, and only after it stopped listening."""

from __future__ import annotations

import socket
import threading

from airflow_ml_provider.runtime.tf_ps_trainer import until_gone


def test_a_server_waits_for_the_chief_then_ends_once_the_chief_stops_listening():
    chief = socket.socket()
    chief.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{chief.getsockname()[1]}"
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (until_gone(address, period_s=0.05, misses=3), done.set()))
    waiter.start()
    assert not done.wait(0.5), "ended before the chief ever listened"
    chief.listen()
    assert not done.wait(0.5), "ended while the chief listens"
    chief.close()
    assert done.wait(30), "still waiting after the chief stopped listening"
    waiter.join()
