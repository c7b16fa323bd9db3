-- Background merges of the tables that take every event and every chain, and of the two that
-- follow them row for row, stop at parts of about 2 GiB on disk. With ten parts to a merge
-- (0014) every byte is rewritten once per generation of merges, and each generation costs
-- about the CPU of the first (a merge's CPU follows its rows). At 10,000 events/s the third
-- generation of events merges ten parts of about 130 MB (some 37 million events, an hour of
-- them) into one, the fourth ten of those, and the engine's own limit (150 GB) lets a day's
-- partition end in a few parts after four or five rewrites of every byte, the later ones as
-- single merges of hours. A 2 GiB limit stops after the third generation: the size of a merge
-- no longer grows with the data kept, and a day holds one part per 1.3-2 GiB (about 20 a day
-- of events at 10,000 events/s, 70 at 40,000: far below the engine's 1,000 a partition before
-- it slows inserts). Queries read the same rows from a few more parts. OPTIMIZE TABLE ...
-- FINAL ignores the limit, as the engine documents. BENCHMARKS.md, "A thirty-first session".
ALTER TABLE {{table "events"}} {{on_cluster}} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 2147483648;

ALTER TABLE {{table "chains"}} {{on_cluster}} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 2147483648;

ALTER TABLE {{table "audit_ids"}} {{on_cluster}} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 2147483648;

ALTER TABLE {{table "report_chains"}} {{on_cluster}} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 2147483648;
