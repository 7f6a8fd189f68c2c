"""The lab demonstrates something: each naive variant goes wrong, each OnceShop path holds.

Every experiment runs exactly as ``make lab`` runs it (smaller counts where the
count does not change the lesson), against the live app and the real sandbox,
and the assertions read the numbers it counted in the database.
"""

import pytest

from lab.context import Lab, Scale
from lab.experiments import runner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def lab(sandbox, live_server) -> Lab:
    return Lab(base_url=live_server.url, scale=Scale.small())


def counts(lab: Lab, number: int) -> dict[str, float]:
    finding = runner(number)(lab)
    assert finding.number == number
    return finding.counts


def test_1_a_disabled_button_does_not_stop_a_second_submit(lab):
    found = counts(lab, 1)
    assert found["naive_orders"] == 2
    assert found["onceshop_orders"] == 1
    assert found["onceshop_replayed"] == 1


def test_2_timestamp_keys_give_concurrent_intents_each_others_answers(lab):
    found = counts(lab, 2)
    assert found["naive_orders"] < found["intents"]
    assert found["naive_shared"] == found["intents"] - found["naive_orders"]
    assert found["onceshop_orders"] == found["intents"]
    assert found["onceshop_shared"] == 0


def test_3_unscoped_keys_serve_another_users_response(lab):
    found = counts(lab, 3)
    assert found["naive_leaks"] == 1
    assert found["naive_second_user_orders"] == 0
    assert found["onceshop_leaks"] == 0
    assert found["onceshop_second_user_orders"] == 1


def test_4_a_dedupe_table_never_expired_grows_the_reaper_keeps_it_flat(lab):
    found = counts(lab, 4)
    per_day = lab.scale.keys_per_day
    assert found["naive_rows_end"] == per_day * found["days"]
    assert found["onceshop_rows_max"] <= 2 * per_day  # about one day's keys, every day


def test_5_get_then_del_lets_several_submits_of_one_token_pass(lab):
    found = counts(lab, 5)
    assert found["naive_orders"] > 1
    assert found["onceshop_orders"] == 1


def test_6_a_crash_between_two_transactions_loses_or_doubles_one_transaction_does_not(lab):
    found = counts(lab, 6)
    assert found["record-first_orders"] == 0  # lost
    assert found["order-first_orders"] == 2  # doubled
    assert found["onceshop_orders_after_crash"] == 0  # rolled back with its record
    assert found["onceshop_orders"] == 1
    assert found["onceshop_records"] == 1


def test_7_wrong_key_discipline_charges_twice_or_stays_stuck(lab):
    found = counts(lab, 7)
    assert found["naive_5xx_charges"] == 2
    assert found["onceshop_5xx_charges"] == 1
    assert found["naive_4xx_paid"] == 0
    assert found["onceshop_4xx_paid"] == 1
    assert found["onceshop_4xx_charges"] == 1


def test_8_immediate_retries_amplify_load_and_keep_the_server_down(lab):
    found = counts(lab, 8)
    assert found["naive_amplification"] > found["onceshop_amplification"]
    assert found["naive_wasted"] > found["onceshop_wasted"]
    assert found["naive_succeeded"] < found["clients"]  # not recovered within the limit
    assert found["onceshop_succeeded"] == found["clients"]


def test_9_check_then_act_debits_many_times_the_conditional_update_once(lab):
    found = counts(lab, 9)
    assert found["naive_debits"] > 1
    assert found["onceshop_debits"] == 1
    assert found["onceshop_ledger_entries"] == 1


def test_10_a_lock_lets_sequential_duplicates_both_run(lab):
    found = counts(lab, 10)
    assert found["naive_orders"] == 2
    assert found["onceshop_orders"] == 1
