package storage

import "fmt"

// MemberRoutes returns the SQL condition that the member row member (a
// members alias) hears a message about sensor (NULL or ” for none) in site
// with severity (each an SQL expression): the routing rule of registry.MemberRouting,
// as the SQL function lockstream_routes (migration 00172), which the planner
// inlines so that a statement choosing who hears something (the fan-out's
// inbox write, notices, incident reminders) filters set-based. The message's
// site is a site event's, or its sensor's (sensors.site).
func MemberRoutes(member, sensor, site, severity string) string {
	return fmt.Sprintf("lockstream_routes(%s, %s, %s, %s)", member, sensor, site, severity)
}

// MemberRoutingRestricts returns the SQL condition that the member row member
// (a members alias) filters what it hears at all: a member for which it is
// false hears every message. It is the predicate of the partial index
// members_routing_restricted_idx (migration 00243), so a statement that looks
// for the members a message does not reach reads only these.
func MemberRoutingRestricts(member string) string {
	return fmt.Sprintf("(%[1]s.routing_min_severity <> 'info' OR %[1]s.routing_sites IS NOT NULL OR %[1]s.routing_sensors IS NOT NULL)", member)
}
