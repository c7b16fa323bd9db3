-- Fewer rewrites of the two tables that take every event and every chain (and of the two that
-- follow them row for row). With the engine's defaults a merge needs about five parts of a
-- size, and a heuristic (on by default in the engine's 26.7) narrows merges further while a
-- partition has few parts: over twelve minutes at 10,000 events/s the merges rewrote each inserted byte 2.15
-- times and took 0.15 of a core, the largest single share of serve's CPU. Twenty parts of a
-- size per merge, without that heuristic, rewrote it 0.90 times (the merges' CPU 0.44) for half
-- as many active parts again (the engine still lowers the base as a partition's parts pass
-- ten, so their number stays bounded); BENCHMARKS.md, "A twenty-fourth session". Queries read the same
-- rows from a few more parts: rows not yet folded by a merge were already there to fold
-- (FINAL or LIMIT 1 BY, see 0001).
ALTER TABLE {{table "events"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 20,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;

ALTER TABLE {{table "chains"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 20,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;

ALTER TABLE {{table "audit_ids"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 20,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;

ALTER TABLE {{table "report_chains"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 20,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;
