-- settings: facts about the data in this database that every process must
-- agree with, one row per name (the last set wins). phone_hash_key_check is
-- a keyed digest of a fixed text under --phone-hash-key: a process whose key
-- gives another digest would store hashes that match none of the stored
-- ones, and statuses stored before would count twice (cmd/wahook).
CREATE TABLE IF NOT EXISTS {{.Database}}.settings
(
    name   String,
    value  String,
    set_at DateTime
)
ENGINE = ReplacingMergeTree(set_at)
ORDER BY name;
