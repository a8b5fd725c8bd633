"""Which previous owners a takeover fences: only processes the group no longer has."""
from scheduler.engine.previous_owner import dead_owners, other_owners, owner_tag, parse_tag

OWN = "p.scheduler.b"


def test_a_tag_names_the_transactional_id_and_the_member():
    assert parse_tag(owner_tag("p.scheduler.a", "m-1")) == ("p.scheduler.a", "m-1")


def test_offsets_without_a_tag_name_no_one():
    assert parse_tag(None) is None
    assert parse_tag("") is None
    assert dead_owners([None, "", "untagged"], set(), set(), OWN) == set()


def test_a_member_the_group_removed_is_fenced():
    tags = [owner_tag("p.scheduler.a", "m-a")] * 4
    assert dead_owners(tags, {"m-b"}, {OWN}, OWN) == {"p.scheduler.a"}


def test_a_live_previous_owner_is_never_fenced():
    tags = [owner_tag("p.scheduler.a", "m-a")]
    assert dead_owners(tags, {"m-a", "m-b"}, {"p.scheduler.a", OWN}, OWN) == set()


def test_a_restart_under_the_same_instance_id_is_not_fenced():
    """Its new member id differs, but a member holds the transactional id: it aborted its predecessor's turn."""
    tags = [owner_tag("p.scheduler.a", "m-a-old")]
    assert dead_owners(tags, {"m-a-new", "m-b"}, {"p.scheduler.a", OWN}, OWN) == set()


def test_the_process_never_fences_itself():
    assert dead_owners([owner_tag(OWN, "m-b-old")], {"m-b"}, {OWN}, OWN) == set()


def test_every_dead_owner_named_by_the_inputs_is_fenced():
    tags = [owner_tag("p.scheduler.a", "m-a"), owner_tag("p.scheduler.c", "m-c"), owner_tag(OWN, "m-b")]
    assert dead_owners(tags, {"m-b"}, {OWN}, OWN) == {"p.scheduler.a", "p.scheduler.c"}


def test_only_tags_naming_another_process_make_the_group_worth_asking():
    """After a broker restart a lone process takes its own partitions back: no group request then."""
    assert other_owners([owner_tag(OWN, "m-b-old"), None, "untagged"], OWN) == set()
    assert other_owners([owner_tag(OWN, "m-b"), owner_tag("p.scheduler.a", "m-a")], OWN) == {"p.scheduler.a"}
