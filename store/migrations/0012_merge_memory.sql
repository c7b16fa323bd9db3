-- The engine's memory for writing events and chains. Measured at a steady 10,000 events/s
-- (BENCHMARKS.md, "A seventh session"), the engine's own defaults spent it where it bought
-- nothing:
--
--   * Merges of chains and events ran with the horizontal algorithm, which reads every column
--     of every source part at once: 300-420 MB for one merge of 6-7 parts of 30,000-125,000
--     rows, although those parts were 2-9 MB compressed. The engine only switches to the
--     vertical algorithm (the sorting key first, then one column at a time) from 131,072 rows;
--     at one insert a second, most merges are below that. Vertical at any size: 15-30 MB for
--     the same merges of chains, 50-180 MB for events (the raw JSON column), and the merges of
--     chains took 0.2-0.4 s instead of 0.7-2.8 s.
--   * An insert of one second of events (10,000 rows, about 20 MB uncompressed) was written as
--     a wide part, a file and its buffers per column and subcolumn: 195-230 MB for each insert.
--     Below 32 MiB it is now a compact part, one file written granule by granule: 40-60 MB.
--     Merged parts, and the inserts of a burst (up to 50,000 rows), are past that and wide.
--   * A vertical merge of events still reads the raw JSON column in blocks of 8,192 rows
--     (about 12 MB) from each source part: 200-300 MB for the larger merges. Blocks of 2,048
--     rows lowered the engine's highest memory in a 2-minute run from 231-279 MB to 139-211
--     MB, and the process's peak RSS by about 75 MiB, for the same CPU.
--
-- With the first two, the engine's tracked memory averaged 61-65 MB instead of 122-144 MB, its
-- peak 270 MB instead of 660-750 MB, and the process used 10% less CPU. TestEngineMemorySettings
-- keeps the first two under a test (a merge's memory cannot be read back once it is done:
-- the third rests on the benchmark). The other tables take few, narrow rows and keep the
-- defaults.
ALTER TABLE {{table "events"}} {{on_cluster}} MODIFY SETTING
    vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1,
    min_bytes_for_wide_part = 33554432,
    merge_max_block_size = 2048;

ALTER TABLE {{table "chains"}} {{on_cluster}} MODIFY SETTING
    vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1;
