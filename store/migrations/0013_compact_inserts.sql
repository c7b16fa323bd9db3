-- Inserts every five seconds, in compact parts. The store writer and the correlator used to
-- insert once a second: each insert makes a part of its table and one of every view on it
-- (six on events, five on chains), and the engine's merges then rewrote 2.7 (10,000
-- events/s) to 3.9 (2,000 events/s) times the bytes inserted. They now insert every five seconds
-- (store.WriterOptions.FlushInterval, correlate's defaultFlushEvery), which makes blocks of up
-- to 50,000 events (FlushRows) and about 85 MB: past migration 0012's 32 MiB, where a part is
-- written wide, a file and its buffers per column, at four to five times a compact part's
-- memory. Below 256 MiB the inserts stay compact. So do merged parts below it, and the engine
-- merges into a compact part all columns at once (0012's one column at a time applies to
-- merges into wide parts only, past 256 MiB now): that and the larger inserts cost 45-66 MB
-- of RSS at 10,000 events/s. BENCHMARKS.md, "A twentieth session", has what it bought: the
-- merges a second fell by 5 and serve's CPU by a third at 2,000 events/s.
ALTER TABLE {{table "events"}} {{on_cluster}} MODIFY SETTING min_bytes_for_wide_part = 268435456;

ALTER TABLE {{table "chains"}} {{on_cluster}} MODIFY SETTING min_bytes_for_wide_part = 268435456;
