import numpy as np

from pinyin_hanzi.lm.sorted_runs import SpillingCounter, whole_groups


def test_spilled_runs_merged_in_chunks_add_up_to_the_counts_of_everything(tmp_path):
    rng = np.random.default_rng(36)
    parts = [(rng.integers(0, 5000, 300), rng.integers(1, 4, 300)) for _ in range(40)]
    counter = SpillingCounter(tmp_path, budget=400)
    for keys, counts in parts:
        counter.add(keys, counts)
    chunks = list(counter.chunks(chunk=50))
    assert len(counter.runs) > 5 and len(chunks) > 10  # several runs, merged a few rows at a time
    keys = np.concatenate([keys for keys, _ in chunks])
    counts = np.concatenate([counts for _, counts in chunks])
    expected = np.bincount(np.concatenate([k for k, _ in parts]), np.concatenate([c for _, c in parts]))
    assert np.array_equal(keys, np.flatnonzero(expected)) and np.array_equal(counts, expected[keys])
    assert counter.rows == sum(path.stat().st_size for path in counter.runs) // 16  # (key, count) int64 rows


def test_a_counter_within_its_budget_stays_in_memory(tmp_path):
    counter = SpillingCounter(tmp_path / "runs", budget=1000)
    counter.add(np.array([5, 3, 5]), np.array([1, 1, 2]))
    counter.add(np.array([3, 9]), np.array([4, 1]))
    assert not counter.spilled and not (tmp_path / "runs").exists()
    [(keys, counts)] = counter.chunks()
    assert keys.tolist() == [3, 5, 9] and counts.tolist() == [5, 3, 1]


def test_whole_groups_never_split_a_group_between_chunks():
    keys = np.array([10, 11, 12, 20, 21, 30, 31, 32, 33, 40])
    chunks = [(keys[:2],), (keys[2:4],), (keys[4:8],), (keys[8:],)]
    regrouped = [chunk[0].tolist() for chunk in whole_groups(chunks, 10)]
    assert [key for chunk in regrouped for key in chunk] == keys.tolist()
    groups = [{key // 10 for key in chunk} for chunk in regrouped]
    assert all(not (first & second) for i, first in enumerate(groups) for second in groups[i + 1:])
