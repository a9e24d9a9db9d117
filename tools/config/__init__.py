"""What to run: the contract (Job, Layout, results), defaults, calibration, resolving and checking a layout.
Imports core and hardware."""
