"""One run's process services: the worker, warm start, device lock, disk space, memory bounds."""
