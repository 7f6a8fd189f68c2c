"""The lab demonstrates something: each naive variant goes wrong, each OnceShop path holds.

Every experiment runs exactly as ``make lab`` runs it, at its sizes
(``Scale()``: OnceShop's column is asserted at the counts a learner sees),
against the app and the real sandbox served in this process the way
``make lab`` serves them (``tools/lab/server.py``), and the assertions read the
numbers it counted in the database.

The experiments share the module's database (each on its own users and
products, as in ``make lab``), flushed once at the end: a flush of every table
after each one would cost more than the experiments.
"""

import re
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.conftest import TEST_PROVIDER_TIMEOUT_S
from tools.lab.context import Lab, Scale
from tools.lab.experiments import runner
from tools.lab.report import Finding, exit_status
from tools.lab.server import free_port, serving

# The experiments commit for real (threads, a server, forked processes) while the
# module fixture runs them, before any test starts; the tests only read what was
# counted, so a plain (rolled back) database marker is all they need.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

Counts = dict[str, float]


def selected_experiments(request: pytest.FixtureRequest) -> set[int]:
    """The experiments whose tests were selected in this module (``-k`` honoured)."""
    numbers = set()
    for item in request.session.items:
        in_module = getattr(item, "module", None) is request.module
        if in_module and (match := re.match(r"test_(\d+)_", item.name)):
            numbers.add(int(match.group(1)))
    return numbers


@pytest.fixture(scope="module")
def found(request, django_db_setup, django_db_blocker) -> Iterator[dict[int, Finding]]:
    """Run the selected experiments once, as ``make lab`` does; what each counted."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    lab = Lab(base_url=base_url, scale=Scale())
    results: dict[int, Finding] = {}
    with (
        django_db_blocker.unblock(),
        override_settings(
            PROVIDER_BASE_URL=f"{base_url}/sandbox",
            SHOP_BASE_URL=base_url,
            PROVIDER_TIMEOUT_S=TEST_PROVIDER_TIMEOUT_S,
        ),
    ):
        try:
            with serving(port):
                for number in sorted(selected_experiments(request)):
                    finding = runner(number)(lab)
                    assert finding.number == number
                    results[number] = finding
            yield results
        finally:
            call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def counts(found):
    """The experiment's counts, once its OnceShop side is known to have held."""

    def of(number: int) -> Counts:
        finding = found[number]
        assert finding.damage == [], finding.onceshop
        assert exit_status([finding]) == 0
        return finding.counts

    return of


def test_the_lab_fails_when_onceshop_shows_damage():
    held = Finding(number=1, mistake="m", naive="n", onceshop="o", holds={"one order": True})
    broke = Finding(number=2, mistake="m", naive="n", onceshop="o", holds={"one order": False})
    assert held.damage == []
    assert broke.damage == ["one order"]
    assert exit_status([held]) == 0
    assert exit_status([held, broke]) == 1


def test_1_a_disabled_button_does_not_stop_a_second_submit(counts):
    found = counts(1)
    assert found["naive_orders"] == 2
    assert found["onceshop_orders"] == 1
    assert found["onceshop_replayed"] == 1


def test_2_timestamp_keys_give_concurrent_intents_each_others_answers(counts):
    found = counts(2)
    assert found["naive_orders"] < found["intents"]
    assert found["naive_shared"] == found["intents"] - found["naive_orders"]
    assert found["intents"] == Scale().concurrent_intents  # the caps on: within one account's
    assert found["onceshop_orders"] == found["intents"]
    assert found["onceshop_shared"] == 0
    assert found["onceshop_refused"] == 0


def test_3_unscoped_keys_serve_another_users_response(counts):
    found = counts(3)
    assert found["naive_leaks"] == 1
    assert found["naive_second_user_orders"] == 0
    assert found["onceshop_leaks"] == 0
    assert found["onceshop_second_user_orders"] == 1


def test_4_a_dedupe_table_never_expired_grows_the_reaper_keeps_it_flat(counts):
    found = counts(4)
    per_day = Scale().keys_per_day
    assert found["naive_rows_end"] == per_day * found["days"]
    assert found["onceshop_rows_max"] <= 2 * per_day  # about one day's keys, every day


def test_5_get_then_del_lets_several_submits_of_one_token_pass(counts):
    found = counts(5)
    assert found["naive_orders"] > 1
    assert found["onceshop_orders"] == 1


def test_6_a_crash_between_two_transactions_loses_or_doubles_one_transaction_does_not(counts):
    found = counts(6)
    assert found["record-first_orders"] == 0  # lost
    assert found["order-first_orders"] == 2  # doubled
    assert found["onceshop_orders_after_crash"] == 0  # rolled back with its record
    assert found["onceshop_orders"] == 1
    assert found["onceshop_records"] == 1


def test_7_wrong_key_discipline_charges_twice_or_stays_stuck(counts):
    found = counts(7)
    assert found["naive_5xx_charges"] == 2
    assert found["onceshop_5xx_charges"] == 1
    assert found["naive_4xx_paid"] == 0
    assert found["onceshop_4xx_paid"] == 1
    assert found["onceshop_4xx_charges"] == 1


def test_8_immediate_retries_amplify_load_and_keep_the_server_down(counts):
    found = counts(8)
    assert found["naive_amplification"] > 3 * found["onceshop_amplification"]
    assert found["naive_wasted"] > found["onceshop_wasted"]
    assert found["naive_succeeded"] < found["clients"]  # not recovered within the limit
    assert found["onceshop_succeeded"] == found["clients"]


def test_9_check_then_act_debits_many_times_the_conditional_update_once(counts):
    found = counts(9)
    assert found["naive_debits"] > 1
    assert found["onceshop_debits"] == 1
    assert found["onceshop_ledger_entries"] == 1


def test_10_a_lock_lets_sequential_duplicates_both_run(counts):
    found = counts(10)
    assert found["naive_orders"] == 2
    assert found["onceshop_orders"] == 1
