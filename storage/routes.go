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
