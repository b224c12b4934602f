-- +goose Up
-- lockstream_newer_open_states(client, sensor, channel, target, after) is the
-- one definition of "a newer state waits behind this one", which makes a
-- state_changed delivery SUPERSEDED instead of RETRY, GIVEN_UP or PENDING
-- again: the open (SCHEDULED, PENDING, RETRY, IN_FLIGHT) state_changed
-- deliveries of the same (client, sensor, channel, target) whose event is
-- later than after. Its callers (the outcome write, for deliveries and for
-- webhooks handed over in flight; the lease sweep, for both) ask
-- EXISTS (SELECT FROM lockstream_newer_open_states(...)).
--
-- A set-returning SQL function, so that the planner inlines it into the
-- caller's EXISTS, which probes deliveries_open_idx of each partition as the
-- condition written out did. A boolean function around EXISTS is not inlined
-- (a scalar SQL function's body may hold no subquery): it ran as a function
-- call per row, and asking it of 4,444 deliveries took 72 ms against 17 ms
-- inlined (PostgreSQL 15). Inlining also needs it to stay LANGUAGE sql,
-- STABLE, not STRICT, not SECURITY DEFINER, with no SET clause, and called
-- in a FROM clause; storage's TestSupersededCheckPlanIsInlined checks it is.
-- +goose StatementBegin
CREATE FUNCTION lockstream_newer_open_states(key_client uuid, key_sensor text, key_channel text, key_target text,
                                             after timestamptz) RETURNS SETOF uuid
LANGUAGE sql STABLE AS $$
    SELECT o.id FROM deliveries o
    WHERE o.client_id = key_client AND o.sensor_id = key_sensor
      AND o.channel = key_channel AND o.target = key_target
      AND o.state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT')
      AND o.event_type = 'state_changed' AND o.event_at > after
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION lockstream_newer_open_states(uuid, text, text, text, timestamptz);
