"""The collector: runs every kernel's accuracy and perf suites on a device and records the run."""
