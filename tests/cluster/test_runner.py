"""`make cluster`'s preflight: what it asks of the machine, named in one message.

The cluster itself is exercised by tests/cluster/cluster_run.py (`make cluster-test`):
it needs RabbitMQ and HAProxy and takes minutes, too long for `make test`.
"""

from __future__ import annotations

from demo.cluster import preflight
from tests.cluster.conftest import free_port


def test_every_missing_engine_is_named_in_one_message_with_its_install_command():
    closed = free_port()  # nothing listens there
    found = preflight.problems(
        broker=f"amqp://guest:guest@127.0.0.1:{closed}//", redis_url=f"redis://127.0.0.1:{closed}/0"
    )
    assert set(found) >= {"rabbitmq", "redis"}
    text = preflight.message(found)
    assert text.count("\n  - ") == len(found)
    assert text.endswith(f"apt-get install -y {' '.join(preflight.PACKAGES[e] for e in found)}")
    assert "rabbitmq-server" in text
    assert "redis-server" in text
