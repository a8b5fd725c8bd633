"""The one replication decision every topic creator applies (scheduler.kafka.replication)."""
from __future__ import annotations

import pytest

from scheduler.kafka.replication import (
    REPLICATION_ENV,
    Replication,
    ReplicationError,
    configured_factor,
    min_insync_replicas,
    replication,
    wanted_factor,
)

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize("brokers, expected", [(1, Replication(1, 1)), (2, Replication(2, 1)),
                                               (3, Replication(3, 2)), (5, Replication(3, 2))])
def test_the_default_is_three_where_the_cluster_has_three_brokers(brokers: int, expected: Replication) -> None:
    assert replication(brokers, environ=NO_ENV) == expected


@pytest.mark.parametrize("factor, min_insync", [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2)])
def test_min_insync_is_the_factor_less_one_capped_at_two(factor: int, min_insync: int) -> None:
    assert min_insync_replicas(factor) == min_insync


def test_a_configured_factor_above_the_brokers_is_refused_naming_the_setting() -> None:
    with pytest.raises(ReplicationError) as refused:
        replication(1, 2, environ=NO_ENV)
    message = str(refused.value)
    assert "cannot create topics with replication factor 2" in message
    assert "1 live broker " in message and REPLICATION_ENV in message


def test_the_flag_wins_over_the_environment_which_wins_over_the_default() -> None:
    env = {REPLICATION_ENV: "2"}
    assert replication(3, environ=env) == Replication(2, 1)
    assert replication(5, 4, environ=env) == Replication(4, 2)
    assert configured_factor(environ={REPLICATION_ENV: " "}) is None


def test_the_wanted_factor_of_existing_topics_is_not_checked_against_the_live_brokers() -> None:
    """A broker down must not stop a process whose topics all exist: they are only compared with the factor."""
    assert wanted_factor(2, 3, environ=NO_ENV) == 3
    assert wanted_factor(2, environ=NO_ENV) == 2


@pytest.mark.parametrize("text", ["three", "0", "-1"])
def test_a_bad_setting_is_refused(text: str) -> None:
    with pytest.raises(ReplicationError, match="replication factor|not a number"):
        replication(3, environ={REPLICATION_ENV: text})
