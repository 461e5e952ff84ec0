"""The merge gate, regression detection, reports and CI workflow templates."""
