"""The checker finds each anomaly it names in a history that has it, and none in one that has
none: a checker that cannot fail proves nothing."""
from checker import Write, check


def clean_history():
    writes = {
        "0-0": Write(0, 0, 0, "ok", 0), "1-0": Write(1, 0, 0, "ok", 1), "0-1": Write(0, 1, 0, "ok", 2),
        "0-2": Write(0, 2, 1, "ok", 0), "1-1": Write(1, 1, 1, "fail", None, "timed out"),
    }
    final = {0: [(0, "0-0"), (1, "1-0"), (2, "0-1")], 1: [(0, "0-2")]}
    polls = {"c0": [("seek", 0), ("read", 0, 0, "0-0"), ("read", 0, 1, "1-0"), ("seek", 0), ("read", 0, 1, "1-0"),
                    ("read", 0, 2, "0-1"), ("seek", 1), ("read", 1, 0, "0-2")]}
    return writes, polls, final


def counts(writes, polls, final):
    return {k: v for k, v in check(writes, polls, final)["counts"].items() if v}


def test_a_clean_history_has_no_anomaly():
    assert counts(*clean_history()) == {}


def test_a_write_acknowledged_without_an_offset_is_lost_only_when_absent_from_its_partition():
    writes, polls, final = clean_history()
    writes["0-2"].offset = None
    assert counts(writes, polls, final) == {}
    final[1] = []
    assert counts(writes, polls, final) == {"lost": 1}


def test_an_acknowledged_write_missing_from_the_final_read_is_lost():
    writes, polls, final = clean_history()
    final[0] = final[0][:2]
    assert counts(writes, polls, final) == {"lost": 1}


def test_another_value_at_an_acknowledged_offset_is_lost_and_inconsistent():
    writes, polls, final = clean_history()
    final[1] = [(0, "x")]
    writes["x"] = Write(2, 0, 1, "unknown")
    assert counts(writes, polls, final) == {"lost": 1, "inconsistent-offsets": 1}


def test_a_value_at_two_offsets_is_a_duplicate():
    writes, polls, final = clean_history()
    final[0].append((3, "0-1"))
    assert counts(writes, polls, final) == {"duplicate": 1}


def test_values_of_one_producer_out_of_its_order_are_reordered():
    writes, polls, final = clean_history()
    writes["0-0"].offset, writes["0-1"].offset = 2, 0
    final[0] = [(0, "0-1"), (1, "1-0"), (2, "0-0")]
    polls["c0"] = []
    assert counts(writes, polls, final) == {"reorder": 1}


def test_reading_on_past_a_held_offset_is_a_poll_skip_and_going_back_is_nonmonotonic():
    writes, polls, final = clean_history()
    polls["c1"] = [("seek", 0), ("read", 0, 0, "0-0"), ("read", 0, 2, "0-1"), ("read", 0, 1, "1-0")]
    assert counts(writes, polls, final) == {"poll-skip": 1, "nonmonotonic-poll": 1}


def test_a_failed_write_that_is_read_is_an_unacknowledged_read():
    writes, polls, final = clean_history()
    final[1].append((1, "1-1"))
    assert counts(writes, polls, final) == {"unacknowledged-read": 1}
