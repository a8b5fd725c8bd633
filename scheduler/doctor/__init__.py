"""`scheduler doctor`: checks of a deployment (scheduler.doctor.cli)."""
