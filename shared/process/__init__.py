"""One service process's life: wiring and shutdown, the admin app, retries and periodic work, logging, systemd notification."""
