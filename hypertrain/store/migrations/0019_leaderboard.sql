-- 0019_leaderboard: the compute leaderboard's order (issue 19 item 7).
--
-- compute_nodes_by_credits: every node by compute credits, most first, then by id (the
--                           leaderboard's order, GET /v1/compute/leaderboard), so a page is an
--                           index walk under LIMIT/OFFSET and a node's rank counts the index
--                           entries before it, never a sort of every node. Not covering: the
--                           columns a row shows (last_seen_ms moves on every lease) stay out of
--                           it, so a lease writes no more index than before; only a payout
--                           moves an entry.

CREATE INDEX compute_nodes_by_credits ON compute_nodes (compute_credits DESC, node_id);
