-- Every further apiserver's record of a chain (loops), as complete as the entry's and the
-- peer's: other_apiservers and other_codes kept only the name and the code, so a loop read back
-- from the store lost what its third apiserver recorded. The sides are correlate.Side as JSON
-- (a loop is rare; its sides are read whole or not at all); empty for every other chain.
ALTER TABLE {{table "chains"}} {{on_cluster}} ADD COLUMN IF NOT EXISTS other_sides String CODEC(ZSTD(1)) AFTER other_codes;

{{if cluster}}ALTER TABLE {{Database}}.chains {{on_cluster}} ADD COLUMN IF NOT EXISTS other_sides String AFTER other_codes{{end}};
