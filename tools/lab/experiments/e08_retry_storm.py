"""8. Retries without backoff and jitter: a retry storm.

A server is down for a second; every client fails at the same moment. Clients
that retry at once multiply the load by the hundreds while it is down, and
when it comes back they arrive all together, more than its capacity: requests
wait in its queue longer than their clients wait for them, so it works on
requests nobody is waiting for, the clients time out and send more, and it
stays overloaded (a metastable failure). The same clients with capped
exponential backoff and full jitter (``onceshop_client``'s schedule, the only
difference between the two runs) send a few requests each, spread out, and
the server drains its queue and recovers.

The server and the clients run in this process, on loopback (``tools/lab/storm.py``).
"""

from __future__ import annotations

import random

from tools.lab.context import Lab
from tools.lab.report import Finding
from tools.lab.storm import StormConditions, StormResult, backoff_policy, immediately, storm

MISTAKE = "retries without backoff and jitter"


def _recovery(result: StormResult, limit_s: float) -> str:
    if result.recovered_s is None:
        return f"not recovered after {limit_s:.0f} s ({result.succeeded}/{result.clients} through)"
    return f"recovered in {result.recovered_s:.1f} s"


def run(lab: Lab) -> Finding:
    conditions = StormConditions(clients=lab.scale.storm_clients)
    naive = storm(immediately, conditions)
    policy = backoff_policy(conditions)
    rng = random.Random()  # noqa: S311 - jitter, not a secret
    ours = storm(lambda retry: policy.delay(retry, rng=rng), conditions)
    capacity = conditions.workers / conditions.service_s
    return Finding(
        number=8,
        mistake=MISTAKE,
        naive=(
            f"{conditions.clients} clients, {conditions.outage_s:.0f} s outage, capacity "
            f"{capacity:.0f}/s: {naive.amplification:.0f}x load, {naive.wasted} wasted, "
            + _recovery(naive, conditions.limit_s)
        ),
        onceshop=(
            f"capped exponential backoff, full jitter: {ours.amplification:.1f}x load, "
            f"{ours.wasted} wasted, " + _recovery(ours, conditions.limit_s)
        ),
        counts={
            "naive_amplification": naive.amplification,
            "naive_wasted": naive.wasted,
            "naive_succeeded": naive.succeeded,
            "naive_recovered_s": -1 if naive.recovered_s is None else naive.recovered_s,
            "onceshop_amplification": ours.amplification,
            "onceshop_wasted": ours.wasted,
            "onceshop_succeeded": ours.succeeded,
            "onceshop_recovered_s": -1 if ours.recovered_s is None else ours.recovered_s,
            "clients": conditions.clients,
        },
        holds={"every client got through": ours.succeeded == conditions.clients},
    )
