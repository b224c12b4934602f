// Package domain holds the types that cross the boundaries of lockstream's boxes
// (as River's rivertype does): what the registry, the inbox, the outbox and the
// API hand each other, and the errors every store maps its failures to. It holds
// no SQL and imports no store client: each box owns its statements and returns
// these types.
package domain
