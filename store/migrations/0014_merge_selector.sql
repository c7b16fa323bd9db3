-- Fewer rewrites of the two tables that take every event and every chain, and of the two that
-- follow them row for row. With the engine's defaults a merge waits for about five parts of a
-- size, so the merges rewrote each inserted byte about twice and were the largest single share
-- of serve's CPU at 10,000 events/s. Ten parts rewrite it a third less often, for a few more
-- active parts: the engine still lowers the base as a partition's parts pass ten, so their
-- number stays bounded. The heuristic that narrows merges as a partition nears its limit of
-- parts (on by default in the engine's 26.7) is off too, since it adds rewrites. Twenty parts
-- saved more CPU, but merging twenty at once raised a burst's peak memory past its bar.
-- BENCHMARKS.md, "A twenty-fourth session", has the figures. Queries read the same rows from a
-- few more parts: rows not yet folded by a merge were already there to fold (FINAL or LIMIT 1
-- BY, see 0001).
ALTER TABLE {{table "events"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 10,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;

ALTER TABLE {{table "chains"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 10,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;

ALTER TABLE {{table "audit_ids"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 10,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;

ALTER TABLE {{table "report_chains"}} {{on_cluster}} MODIFY SETTING
    merge_selector_base = 10,
    merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0;
