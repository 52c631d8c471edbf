"""The event bus: NATS subjects, the typed wake-up messages on them, and who may publish what."""
