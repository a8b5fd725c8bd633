"""Helpers shared by the unit and integration tests (a package: `from helpers.waiting import wait_until`)."""
