-- Merges of events and chains write wide parts, while their inserts stay compact. The engine
-- merges into a compact part with the horizontal algorithm, every column of every row at once,
-- and into a wide part with the vertical one (0012: the sorting key, then a column at a time).
-- Measured on the rows a load at 10,000 events/s stored (BenchmarkMerge), a merge into a
-- compact part took about three times the CPU per row of one into a wide part for events, and
-- five times for chains, for the same bytes on disk. Below 0013's 256 MiB the merges of chains
-- (an insert is 17-25 MB, ten of them to a merge) and the smaller merges of events were compact.
-- The part format follows the part's size, for inserts and merges alike, so the thresholds sit
-- above what one insert holds: the writer's 50,000 events (about 85 MB) and the correlator's
-- flush of 32,768-40,960 chains stay compact, at 0013's memory, and a merge past them is wide.
-- BENCHMARKS.md, "A twenty-eighth session", has the figures.
ALTER TABLE {{table "events"}} {{on_cluster}} MODIFY SETTING min_bytes_for_wide_part = 134217728;
ALTER TABLE {{table "chains"}} {{on_cluster}} MODIFY SETTING min_bytes_for_wide_part = 67108864;
