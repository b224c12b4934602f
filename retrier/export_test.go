package retrier

// HandoffBacklog is handoffBacklog, for the tests of the hand-over's places.
const HandoffBacklog = handoffBacklog
