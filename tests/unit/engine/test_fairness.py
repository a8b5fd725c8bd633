from scheduler.engine.fairness import RateLimits, TokenBucket, interleave


def test_bucket_refills_with_elapsed_time_and_caps_at_burst():
    bucket = TokenBucket(rate=10, burst=5)
    assert bucket.take(100, now_ms=0) == 5
    assert bucket.take(100, now_ms=100) == 1
    assert bucket.take(100, now_ms=10_000) == 5


def test_small_tenants_are_served_before_a_large_one_exhausts_the_budget():
    items = [("big", f"b{i}") for i in range(1000)] + [(f"small{j}", f"s{j}") for j in range(10)]
    chosen = interleave(items, budget=50, limits=RateLimits(lambda tenant: 1e9), now_ms=0).chosen
    assert len(chosen) == 50
    assert {f"s{j}" for j in range(10)} <= set(chosen)
    assert chosen[:20].count("b0") == 1  # the big tenant takes turns, one slot a round


def test_weights_give_a_tenant_more_slots_a_round():
    items = [("a", f"a{i}") for i in range(100)] + [("b", f"b{i}") for i in range(100)]
    chosen = interleave(items, budget=40, limits=RateLimits(lambda tenant: 1e9), now_ms=0, weights={"a": 3}).chosen
    assert sum(1 for c in chosen if c.startswith("a")) == 30


def test_rate_limit_holds_back_work_and_counts_it():
    limits = RateLimits(lambda tenant: 10 if tenant == "noisy" else 1e9)
    items = [("noisy", i) for i in range(100)] + [("calm", 1000 + i) for i in range(5)]
    selection = interleave(items, budget=1000, limits=limits, now_ms=0)
    assert len(selection.chosen) == 15
    assert selection.held_back == {"noisy": 90}
    later = interleave([("noisy", i) for i in range(90)], budget=1000, limits=limits, now_ms=1000)
    assert len(later.chosen) == 10


def test_tokens_not_used_because_of_the_budget_are_given_back():
    limits = RateLimits(lambda tenant: 100)
    interleave([("t", i) for i in range(100)], budget=10, limits=limits, now_ms=0)
    assert len(interleave([("t", i) for i in range(100)], budget=1000, limits=limits, now_ms=0).chosen) == 90


def test_a_changed_rate_takes_effect_at_once():
    rates = {"t": 10.0}
    limits = RateLimits(lambda tenant: rates[tenant])
    assert len(interleave([("t", i) for i in range(100)], 1000, limits, now_ms=0).chosen) == 10
    rates["t"] = 50.0
    assert len(interleave([("t", i) for i in range(100)], 1000, limits, now_ms=0).chosen) == 50
