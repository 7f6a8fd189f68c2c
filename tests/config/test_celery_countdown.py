"""Task countdowns in whole seconds: what RabbitMQ's quorum queues can delay by."""

import pytest
from kombu.transport.native_delayed_delivery import calculate_routing_key

from config.celery import whole_seconds


@pytest.mark.parametrize(
    ("countdown", "sent"), [(0.0, 0), (-1.0, 0), (0.4, 1), (1.0, 1), (2.5, 3), (30.0, 30)]
)
def test_a_countdown_is_sent_as_whole_seconds_rounded_up(countdown, sent):
    assert whole_seconds(countdown) == sent


def test_a_sub_second_countdown_is_refused_by_quorum_delays_unless_rounded_up():
    # Celery sends a countdown over 0 on a quorum queue with kombu's routing key for
    # native delayed delivery, from int(countdown): 0.4 s was refused (the sandbox's
    # notification spread made such delays, and those copies were never sent).
    with pytest.raises(ValueError, match="countdown must be a positive number"):
        calculate_routing_key(int(0.4), "celery")

    assert calculate_routing_key(whole_seconds(0.4), "celery").endswith(".celery")
