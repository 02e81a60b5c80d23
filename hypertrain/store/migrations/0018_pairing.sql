-- 0018_pairing: who may hold the two copies of one job, and sybil brakes (issue 19 items 1-2;
-- the rules are hypertrain/compute/pairing.py and hypertrain/compute/sybils.py).
--
-- compute_nodes.account:      the account a node belongs to: its own node id, or (a key minted
--                             with ``account`` proven by an existing node key) that node's
--                             account. Two copies of one job never go to one account.
-- compute_nodes.mint_network: the source network the key was minted from (IPv4 /24, IPv6 /48;
--                             NULL: not known); keyless mints are counted per network per
--                             minute from it (compute_nodes_minted).
-- compute_nodes.network:      the network of the node's latest register or lease (status).
-- compute_nodes.probation:    agreed answers the node still owes before it earns: set at mint
--                             when its network had a node disabled in the last day.
-- compute_copies.network:     the network the copy was leased from: two live or answered
--                             copies of one job never share one.
-- compute_credits.probation:  1 when the payout was an answer given on probation (amount 0): a
--                             claw-back of it owes that answer again.
-- compute_strikes.network:    the network of the struck copy's lease (network strikes);
-- compute_strikes.disabled_until_ms: set on the strike that disabled the node, to the instant
--                             it is re-enabled (compute_strikes_disabling: "a node of this
--                             network was disabled in the last day").

ALTER TABLE compute_nodes ADD COLUMN account TEXT;
ALTER TABLE compute_nodes ADD COLUMN mint_network TEXT;
ALTER TABLE compute_nodes ADD COLUMN network TEXT;
ALTER TABLE compute_nodes ADD COLUMN probation INTEGER NOT NULL DEFAULT 0;
UPDATE compute_nodes SET account = node_id;

ALTER TABLE compute_copies ADD COLUMN network TEXT;

ALTER TABLE compute_credits ADD COLUMN probation INTEGER NOT NULL DEFAULT 0
    CHECK (probation IN (0, 1));

ALTER TABLE compute_strikes ADD COLUMN network TEXT;
ALTER TABLE compute_strikes ADD COLUMN disabled_until_ms INTEGER;

CREATE INDEX compute_nodes_minted ON compute_nodes (mint_network, created_ms)
    WHERE mint_network IS NOT NULL;
CREATE INDEX compute_strikes_by_network ON compute_strikes (network, day)
    WHERE network IS NOT NULL;
CREATE INDEX compute_strikes_disabling ON compute_strikes (network, disabled_until_ms)
    WHERE disabled_until_ms IS NOT NULL;
