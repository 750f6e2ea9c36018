"""softrdma.device: the device daemon's parts (shared memory, ABI, GID table,
sysfs tree, engine, control socket).  Submodules are imported on demand."""
