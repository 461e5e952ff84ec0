"""The merge gate (``judge``), regression detection, bisection and reports. The CI workflow templates and the
shipped history are data in the repository's ci/ folder, not part of this package."""
