package inbox

// OutboxChannel exposes outboxChannel to the external tests.
const OutboxChannel = outboxChannel
